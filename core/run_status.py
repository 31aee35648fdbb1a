"""What a run looks like now, read from its output directory: for `sponge status --run DIR`.

Why files, not a socket: a run's output directory is the one place every run already has, readable
while the run goes, after it ended and after it crashed, by any tool (a dashboard, node_exporter's
textfile collector, `cat`), with no port to open. A run of `sponge run --policy ...` writes, once a
second (core/spark/live_policy.py):

    OUTPUT/_status/latest.json     the last second's figures, replaced atomically
    OUTPUT/_status/metrics.prom    the same as Prometheus gauges (sponge_*), for a textfile collector
    OUTPUT/_status/history.jsonl   one line per second, the last HISTORY_LINES of them at most
    OUTPUT/_policy/decisions.jsonl the policy's decision log (policy/decision_log.py), kept on --resume

The leading underscores keep them out of the results: Spark's Parquet readers and core/results.py skip
every path with a component starting with "_" or ".".
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from core.errors import InputError
from core.run_output import MARKER

STATUS_DIR = "_status"
LATEST = "latest.json"
METRICS = "metrics.prom"
HISTORY = "history.jsonl"
EMF = "emf.jsonl"  # CloudWatch Embedded Metric Format, one document a second (runs on AWS)
HISTORY_LINES = 3600  # an hour of seconds; the file holds between this and twice this many lines
POLICY_DIR = "_policy"
DECISIONS = "decisions.jsonl"
SUMMARY = "summary.json"
STALE_S = 5.0  # a running run's latest.json older than this: the run is not updating it (crashed, stopped)
TAIL_BYTES = 256 * 1024  # the end of the decision log read for its last decisions


def read_status(run: Path, decisions: int = 5, now: float | None = None) -> dict[str, Any]:
    """The run at `run`: its marker's query and start, the live figures, its summary if it ended, and
    its last `decisions` decisions that were not a hold. InputError when `run` is not a run."""
    if not run.is_dir():
        raise InputError(
            f"{run} is not a directory", hint="pass the --output directory of a `sponge run` as --run"
        )
    marker = run / MARKER
    if not marker.is_file():
        raise InputError(
            f"{run} is not a sponge run: it has no {MARKER}",
            hint="pass the --output directory of a `sponge run` as --run",
        )
    info = _json(marker) or {}
    latest = _json(run / STATUS_DIR / LATEST)
    summary = _json(run / SUMMARY)
    now = time.time() if now is None else now
    state = "starting" if summary is None else "ended"
    if latest is not None:
        state = latest.get("state", "running")
        if state == "running" and now - float(latest.get("at", 0)) > STALE_S:
            state = "not updating"
    if summary is not None and (latest is None or state != "running"):
        state = "stopped" if summary.get("stopped") else "ended"
    return {
        "run": str(run),
        "query": info.get("query"),
        "started": info.get("started"),
        "state": state,
        "live": latest,
        "summary": summary,
        "decisions": last_decisions(run / POLICY_DIR / DECISIONS, decisions),
        "watched": latest is not None,  # False: the run was started without --policy
    }


def last_decisions(path: Path, n: int) -> list[dict[str, Any]]:
    """The last `n` decisions of the log at `path` whose trigger fired (not "hold"), oldest first; reads
    only the log's end, so a log of days costs what its last lines cost."""
    if n <= 0 or not path.is_file():
        return []
    with path.open("rb") as f:
        f.seek(0, 2)
        size = f.tell()
        f.seek(max(0, size - TAIL_BYTES))
        tail = f.read()
    lines = tail.split(b"\n")[1:] if size > TAIL_BYTES else tail.split(b"\n")  # the first may be cut
    found: list[dict[str, Any]] = []
    for line in reversed(lines):
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # blank, or a line being written
        decision = entry.get("decision") if isinstance(entry, dict) else None
        if isinstance(decision, dict) and decision.get("trigger") != "hold":
            found.append(decision)
            if len(found) == n:
                break
    return found[::-1]


def _json(path: Path) -> dict[str, Any] | None:
    """The JSON object at `path`, or None when there is none (yet); a torn file reads as none, since
    every writer here replaces its file whole and a reader may meet one only mid-copy."""
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None


def _rate(v: Any) -> str:
    return f"{v:,.0f}/s" if isinstance(v, int | float) else "-"


def _num(v: Any, fmt: str = "{:,}") -> str:
    return fmt.format(v) if isinstance(v, int | float) else "-"


def render(status: dict[str, Any]) -> list[str]:
    """A short human view of `read_status`'s result, one line per item."""
    lines = [
        f"run {status['run']}: {status['query'] or '?'} started {status['started'] or '?'}, {status['state']}"
    ]
    live = status["live"]
    if live is not None:
        cpu = live.get("cpu")
        lines += [
            f"  t {live.get('t', 0):,.0f} s, policy {live.get('policy')}",
            f"  input {_rate(live.get('input_rate'))}, processed {_rate(live.get('processed_rate'))}, "
            f"backlog {_num(live.get('backlog'))} records, "
            f"queue delay {_num(live.get('queue_delay_s'), '{:.1f}')} s",
            f"  VM: CPU {_num(cpu, '{:.0%}')} of {_num(live.get('vm_cores'))} cores, load "
            f"{_num(live.get('load'), '{:.0%}')}, last epoch {_num(live.get('epoch_s'), '{:.2f}')} s",
            f"  offload: share {_num(live.get('share'), '{:.0%}')}, workers {_num(live.get('workers'))} "
            f"planned, {_num(live.get('workers_connected'))} connected, "
            f"{_num(live.get('records_offloaded'))} records offloaded",
            f"  trigger now: {live.get('trigger') or '-'}; last fired: {live.get('last_fired') or '-'}"
            + (f" at t {live['last_fired_t']:,.0f} s" if live.get("last_fired_t") is not None else ""),
        ]
    elif not status["watched"]:
        lines.append("  no live figures: the run was started without --policy (see `sponge run --help`)")
    for d in status["decisions"]:
        lines.append(
            f"  decision t {d.get('t', 0):,.0f} s: {d.get('trigger')} -> "
            f"share {_num(d.get('share'), '{:.0%}')}, "
            f"{_num(d.get('workers'))} workers (required {_rate(d.get('required_rate'))})"
        )
    summary = status["summary"]
    if summary is not None and status["state"] in ("ended", "stopped"):
        lines.append(
            f"  summary: {_num(summary.get('records_in'))} records in "
            f"{_num(summary.get('wall_s'), '{:,.1f}')} s, "
            f"{_num(summary.get('records_offloaded'))} offloaded, {_num(summary.get('epochs'))} epochs"
        )
        policy = summary.get("policy")
        if isinstance(policy, dict):
            lines.append(
                f"  policy {policy.get('name')}: {_num(policy.get('plans_published'))} plans, max share "
                f"{_num(policy.get('max_share'), '{:.0%}')}, "
                f"offloading for {_num(policy.get('offloaded_s'))} s, "
                f"triggers {policy.get('triggers')}"
            )
    return lines

"""What the routed plan costs the VM while it offloads nothing: plain against routed at share 0.

Method. Warms the JVM with a short unmeasured plain run (the session's first run pays for loading and
compiling everything: measured, its epochs were 40 % longer), then runs the same query on the same
paced input (--rate events/s for --seconds, Spark local[2,4] on one pinned core, one shuffle partition)
three times in one process: plain (no routers), routed
with an offload plan whose share is 0 (the agent and its workers on the other core, idle), and plain
again, so drift on a shared machine shows as a gap between the two plain runs. Each run's first
--skip epochs (planning, code generation) are dropped; printed per run are the medians of Spark's
per-epoch durations (triggerExecution, addBatch, queryPlanning, walCommit, commitOffsets) and the
routed run's ratio to the mean of the plain ones. The paper's inactive proxies cost nothing
measurable; this is how far ours are from that.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.report_line import finish

METHOD = (__doc__ or "").split("Method. ", 1)[1].replace("\n", " ").strip()
WARMUP_S = 10.0  # input of the unmeasured run that warms the JVM
PARTS = ("triggerExecution", "addBatch", "queryPlanning", "walCommit", "commitOffsets")


def _run(query: str, rate: float, seconds: float, routed: bool, out: Path, skip: int) -> dict[str, float]:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.schedule import RateSchedule
    from core.run_output import Existing
    from core.spark.offload_session import OffloadConfig
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig

    others = sorted(set(range(os.cpu_count() or 1)) - {0})
    offload = (
        OffloadConfig(share=0.0, workers=1, worker_cpus=frozenset(others[:1]) or None) if routed else None
    )
    config = RunConfig(
        query=query,
        generator=GeneratorConfig(seed=1, events=int(rate * seconds), schedule=RateSchedule.constant(rate)),
        output=out,
        pace=True,
        spark=SparkConfig(master="local[2,4]", shuffle_partitions=1),
        offload=offload,
        existing=Existing.REPLACE,
    )
    durations: list[dict[str, float]] = []
    run_query(config, progress=lambda p: durations.append(p.get("durationMs") or {}))
    kept = durations[skip:]
    if not kept:
        raise SystemExit(
            f"error: the run had {len(durations)} epochs, none after --skip {skip} (raise --seconds)"
        )
    return {part: float(statistics.median(d.get(part, 0) for d in kept)) for part in PARTS} | {
        "epochs": float(len(kept))
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    os.sched_setaffinity(0, {0})  # the VM side on one core; the routed run's agent pins itself elsewhere
    started = time.monotonic()
    runs: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="inactive-proxies-") as tmp:
        _run(args.query, args.rate, min(args.seconds, WARMUP_S), False, Path(tmp) / "warmup", 0)
        for name, routed in (("plain", False), ("routed_share_0", True), ("plain_again", False)):
            runs[name] = _run(args.query, args.rate, args.seconds, routed, Path(tmp) / name, args.skip)
    plain = {p: (runs["plain"][p] + runs["plain_again"][p]) / 2 for p in PARTS}
    ratio = {p: runs["routed_share_0"][p] / plain[p] if plain[p] > 0 else None for p in PARTS}
    return {
        "query": args.query,
        "rate": args.rate,
        "runs": runs,
        "routed_vs_plain": ratio,
        "elapsed_s": time.monotonic() - started,
    }


def table(report: dict[str, Any]) -> Any:
    from rich.table import Table

    t = Table(title=f"{report['query']} at {report['rate']:,.0f} events/s: median ms per epoch")
    t.add_column("run")
    for part in PARTS:
        t.add_column(part, justify="right")
    for name, figures in report["runs"].items():
        t.add_row(name, *(f"{figures[p]:,.0f}" for p in PARTS))
    t.add_row(
        "routed / plain",
        *(f"{r:.2f}" if r is not None else "n/a" for r in report["routed_vs_plain"].values()),
    )
    return t


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.inactive_proxies",
        description="What the routed plan costs the VM while it offloads nothing (plain vs share 0).",
    )
    ap.add_argument("--query", default="q5", help="NEXMark query (default q5)")
    ap.add_argument("--rate", type=float, default=60_000, help="paced input, events/s (default 60000)")
    ap.add_argument("--seconds", type=float, default=25, help="input length of each run (default 25)")
    ap.add_argument("--skip", type=int, default=8, help="first epochs of each run left out (default 8)")
    ap.add_argument("--json", action="store_true", help="end with one line of JSON")
    args = ap.parse_args(argv)
    if args.rate <= 0 or args.seconds <= 0 or args.skip < 0:
        ap.error("--rate and --seconds must be positive and --skip at least 0")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run(args)
    return finish(report, table(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())

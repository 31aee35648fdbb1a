"""The offloaded CPU share, per record: how much of the VM's per-record CPU cost of the offloaded operators
workers take.

Run:  .venv/bin/python -m bench.offloaded_share [--queries q3,q4,q6,q8] [--events N1] [--events-large N2]
      [--epochs E] [--repeats R] [--json]

The figure (docs: the "Offloaded CPU share" ruling of the shared decisions): worker CPU spent on the
offloaded operators / (that + the VM CPU the same operators cost without offloading), at offload share
1.0 over the same input, here per record. Why per record: a run's totals are dominated by what every
micro-batch costs whatever it holds (Spark's planning, offsets and commits, the hand-off of each batch
to Python), not by the per-record cost the share is about: at 60,000 events Q8's operators cost the
VM 3.7 s in all against 0.09 s of worker time. So every variant runs at two sizes,
N1 < N2 events, cut into the SAME number E of micro-batches, and its per-record cost is the slope
(CPU(N2) - CPU(N1)) / (N2 - N1): the fixed per-epoch (and per-run) costs are the same at both sizes and
cancel. Per query, per repeat, six runs over the same generated events (--seed), through the product's
runner in ONE Spark session (the product's `local[2,4]`, 2 shuffle partitions), each variant at N1 then N2:

  sources   the query's sources read exactly as its runs read them (`core.spark.streams.nexmark_sources`:
            the same options, batches, watermark and punctuation handling), unioned on their event
            time and filtered by a predicate no record meets (event time before 1970), into the same
            Parquet sink, trigger and end-of-stream handshake (`core.spark.runner.stream_to_end`).
  plain     `run_query` with `offload=None`: the rewritten plan with inactive proxies, every operator
            on the VM.
  offloaded `run_query` with `OffloadConfig(share=1.0, workers=--workers, prewarm=--workers)`: every
            record goes to the embedded Lambda workers; the VM reads, routes and merges.

Equal epochs. A run's source cuts an epoch every `max_events_per_batch` offsets; the bench sets it to
ceil((N + 1) / E) (N events and the end-of-stream punctuation), so both sizes cut E epochs. A routed
source stretches its cap by `share_scale(share)` (ADR 0008: an offloaded event costs the VM
a fraction of a kept one), 10x at share 1.0; the offloaded run is given the cap divided by
that factor, so it too cuts E epochs at both sizes, with batches of the same offsets as the other two
variants (the per-epoch costs would cancel anyway, but equal batches keep the per-record costs
comparable: state per batch, rows per chunk). Each run's epoch count (summary.json `epochs`; the
baseline's from the same progress stream) is printed per variant as N1/N2, and a mismatch is a note.

Figures, each in microseconds per event (per generated event offset, the same denominator for all):

  W         the slope of the workers' CPU of the offloaded run: the summary's `worker_cpu_s` (the
            workers' `time.process_time` summed by the agent once per resolved chunk) or, where the
            summary does not carry it, the agent's own `worker_cpu_us` counter read from its totals
            once the run has stopped it. Also given per offloaded record (`w_us_per_offloaded_record`).
  V_plain   slope(plain) - slope(sources): the operators' per-record VM CPU without offloading.
  V_resid   slope(offloaded) - slope(sources): what the VM still spends per record on those operators
            at share 1.0 (routing, the second read of each source for the workers' share, the round
            trips, merging the workers' output).
  share          W / (W + V_plain): the ruling's figure, per record.
  vm_cpu_taken   1 - V_resid / V_plain: the share of the VM's per-record CPU cost workers take off it
                 (negative when offloading costs the VM more per record than the operators did).

Noise. On a shared machine one run's VM CPU wanders by some tenths of a second: --noise-cpu-s, default
0.25 s, the bench's assumption for one run, from runs of Q8 on this project's 2-core machine. V_plain
and V_resid each rest on four runs, so their noise is taken as 2 x that / (N2 - N1), or half the
spread of the repeats' values where there are two or more repeats and that is larger (W's noise is
that spread alone: it subtracts no baseline). A V_plain not above its noise gives no shares (the
operators' per-record cost is not measurable at those sizes, and a ratio over it would be noise); a W
not above its noise gives no `share`; each is said in the row's note, as is a V_resid within noise of
0 or below it. A larger N2 - N1 shrinks the noise.

Why the baseline only reads the sources, and how. The VM cost of "the same operators without
offloading" is a difference of two variants: one with the operators and one without, over the same
input. The runner lowers a query whole, so the least invasive run without them is a hand-written
query on the very source frames the runner builds (as bench/throughput_variants.py's native variant
does), ended by the runner's own `stream_to_end`: every record is generated in Spark's Python
workers, shipped to the JVM, watermarked and then dropped by a predicate Spark cannot prove false
(and cannot push below the watermark, which reads the event time), so the baseline pays for the read,
the watermark and the per-epoch machinery, and nothing for any operator. The caveat: a chain ends
before a join, a non-mergeable aggregate or the sink (core/offload_chains.py), so where the VM keeps
operators after the chain (Q3's join, Q4's and Q6's close decisions, Q8's multiplication of the
counted sides and its sink) V_plain and V_resid both include those operators' per-record cost:
`share` is then a lower bound of the chain's own share, and V_plain - V_resid (what offloading saves
the VM per record) is unaffected.

VM CPU is the Spark JVM and every process under it (Spark's Python workers, the Python data source's
planner), each counted with the CPU of the children it has reaped: user + system time of the whole
tree, read from /proc (psutil) right before and right after each run, after a garbage collection on
both sides. Why not `policy.monitor.ProcessTreeCpu`: it counts a process from the walk that finds it
(right for a per-second utilisation, where a newcomer's start-up would be one huge sample) and loses
what a process spent between its last reading and its exit; a run's total wants the kernel's exact
accounting, which two snapshots of the tree with its reaped children give. The VM agent, its workers
and this process (the driver) are outside the JVM's tree and not counted as VM CPU, although on a real
deployment the agent runs on the VM: V_resid leaves out its dispatching and its checks of each result.

Warm-up: before the first measured repeat of each query, one unmeasured run of each variant on
--warmup-events events (default: --events), so that none of them pays the JVM's class loading and
compilation, or the imports of a fresh Python worker, for another. Figures are medians over --repeats
of each repeat's paired slopes; the shares are computed from those medians, so they follow from the
printed numbers. Within a repeat every variant runs at one size, then every variant at the other (so
each run follows the same variant at both sizes), N1 first in odd repeats and N2 first in even ones
(so a drift over the bench leans on neither size).

Output: a table on stdout and one line per run on stderr; with --json the last stdout line is one JSON
object, {"queries": [{"query": "q8", "share": ..., "vm_cpu_taken": ..., "notes": [...], ...}, ...], ...}.
A query that fails is reported with its error, the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from bench.report_line import finish
from bench.throughput_variants import _quiesce as quiesce
from core.errors import SpongeError
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES, get_query
from core.offload_plan import share_scale
from core.plan import Source
from core.run_output import Existing
from core.spark.offload_session import OffloadConfig, OffloadSession
from core.spark.runner import RunConfig, RunHooks, run_query, stream_to_end
from core.spark.session import SparkConfig, current_jvm, spark_session
from core.spark.streams import nexmark_sources
from router.stats import WORKER_CPU_US as AGENT_WORKER_CPU_US  # the agent's workers' CPU, microseconds

DEFAULT_QUERIES = ("q3", "q4", "q6", "q8")
KINDS = ("sources", "plain", "offloaded")
EVENT_TIME = "date_time"  # every NEXMark entity's event time, the column the sources watermark
NEVER = "1970-01-01"  # no generated event is this old: the baseline's predicate drops every record
SUMMARY_WORKER_CPU_S = (
    "worker_cpu_s"  # summary.json: the workers' CPU seconds (core/spark/offload_session.py)
)
FIGURES = ("w_us_per_event", "v_plain_us_per_event", "v_resid_us_per_event")
METHOD = (
    "per record: every variant runs at two sizes N1 < N2 cut into the same number of epochs, and its cost "
    "per event is the slope (CPU(N2) - CPU(N1)) / (N2 - N1), so per-epoch and per-run fixed costs cancel; "
    "share = W / (W + V_plain) and vm_cpu_taken = 1 - V_resid / V_plain, both from per-event figures; "
    "W = slope of the workers' CPU (process_time, summed once per resolved chunk) at offload share 1.0; "
    "V_plain = slope of the VM CPU of the run without offloading - slope of a run that only reads the "
    "sources; V_resid = the same for the share-1.0 run; VM CPU = user + system time of the Spark JVM's "
    "process tree with reaped children; medians over repeats of paired slopes; a figure not above its "
    "noise gives no ratio (see the note)"
)


# ---- pure figures --------------------------------------------------------------------------------


def batch_cap(events: int, epochs: int) -> int:
    """The `max_events_per_batch` that cuts `events` events (and the punctuation after them) into
    `epochs` micro-batches: the same count at every size, so per-epoch costs cancel in a slope."""
    return max(1, math.ceil((events + 1) / epochs))


def offloaded_cap(cap: int) -> int:
    """The cap to give the share-1.0 run so that its source, which stretches its cap by the product's
    `share_scale(1.0)` (ADR 0008), still cuts epochs of about `cap` offsets: rounded up, so the
    stretched cap is never below `cap` and the run never cuts an epoch more than the others."""
    return max(1, math.ceil(cap / share_scale(1.0)))


def slope_us(small: float, large: float, n1: int, n2: int) -> float:
    """Microseconds per event between a figure in seconds at n1 events and at n2 events."""
    return (large - small) / (n2 - n1) * 1e6


def repeat_figures(runs: Mapping[str, Sequence[Mapping[str, Any]]], n1: int, n2: int) -> dict[str, Any]:
    """One repeat's per-event figures from its runs: `runs[kind]` is that variant's [run at n1, run at
    n2], each with its `cpu_s` (and the offloaded ones their `worker_s` and `records_offloaded`)."""
    slopes = {k: slope_us(runs[k][0]["cpu_s"], runs[k][1]["cpu_s"], n1, n2) for k in KINDS}
    small, large = runs["offloaded"]
    w = w_rec = None
    if small.get("worker_s") is not None and large.get("worker_s") is not None:
        w = slope_us(small["worker_s"], large["worker_s"], n1, n2)
        records = large.get("records_offloaded", 0) - small.get("records_offloaded", 0)
        if records > 0:
            w_rec = (large["worker_s"] - small["worker_s"]) / records * 1e6
    return {
        "w_us_per_event": _round(w, 3),
        "v_plain_us_per_event": round(slopes["plain"] - slopes["sources"], 3),
        "v_resid_us_per_event": round(slopes["offloaded"] - slopes["sources"], 3),
        "w_us_per_offloaded_record": _round(w_rec, 3),
        "slopes_us_per_event": {k: round(v, 3) for k, v in slopes.items()},
    }


def _round(x: float | None, digits: int) -> float | None:
    return None if x is None else round(x, digits)


def share_figures(
    w: float | None,
    v_plain: float | None,
    v_resid: float | None,
    *,
    noise_v_plain: float = 0.0,
    noise_v_resid: float = 0.0,
    noise_w: float = 0.0,
) -> dict[str, Any]:
    """The two shares from per-event W, V_plain and V_resid (module doc), and the notes that say why a
    share is missing or what to make of it. A share is None where it would be a ratio of noise: a
    V_plain not above its noise (no share at all), a W not above its noise (no `share`)."""
    notes: list[str] = []
    share = taken = None
    if v_plain is not None and v_plain <= noise_v_plain:
        notes.append(
            f"V_plain {v_plain:.3f} us/event is {_verdict(v_plain)} (noise {noise_v_plain:.3f}): the "
            "operators' per-record VM cost is not measurable at these sizes, so no shares"
        )
    elif v_plain is not None:
        if w is not None and w <= noise_w:
            notes.append(f"W {w:.3f} us/event is {_verdict(w)} (noise {noise_w:.3f}): no share")
        elif w is not None:
            share = w / (w + v_plain)
        if v_resid is not None:
            taken = 1.0 - v_resid / v_plain
            if abs(v_resid) <= noise_v_resid:
                notes.append(
                    f"V_resid {v_resid:.3f} us/event is within noise of 0 (noise {noise_v_resid:.3f}): "
                    f"vm_cpu_taken is 1 within {noise_v_resid / v_plain:.2f}"
                )
            elif v_resid < 0:
                notes.append(
                    f"V_resid {v_resid:.3f} us/event is below 0 beyond noise: the share-1.0 run cost the VM "
                    "less per record than reading the sources alone"
                )
    return {
        "w_us_per_event": _round(w, 3),
        "v_plain_us_per_event": _round(v_plain, 3),
        "v_resid_us_per_event": _round(v_resid, 3),
        "share": _round(share, 4),
        "vm_cpu_taken": _round(taken, 4),
        "noise_us_per_event": {
            "w": round(noise_w, 3),
            "v_plain": round(noise_v_plain, 3),
            "v_resid": round(noise_v_resid, 3),
        },
        "notes": notes,
    }


def _verdict(x: float) -> str:
    return "not positive" if x <= 0 else "within noise"


def noise_floor_us(noise_cpu_s: float, n1: int, n2: int) -> float:
    """The noise of a V figure from one repeat: four runs of about `noise_cpu_s` each, over N2 - N1."""
    return 2 * noise_cpu_s / (n2 - n1) * 1e6


def _median(values: Sequence[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if len(present) == len(values) and present else None


def _half_spread(values: Sequence[float | None]) -> float:
    present = [v for v in values if v is not None]
    return (max(present) - min(present)) / 2 if len(present) >= 2 else 0.0


def median_figures(repeats: Sequence[Mapping[str, Any]], floor_us: float) -> dict[str, Any]:
    """The medians over repeats of W, V_plain and V_resid (and of the variants' slopes and W per offloaded
    record), each figure's noise (module doc) and the shares computed from those medians."""
    w, v_plain, v_resid = (_median([r[k] for r in repeats]) for k in FIGURES)
    spread = {k: _half_spread([r[k] for r in repeats]) for k in FIGURES}
    fig = share_figures(
        w,
        v_plain,
        v_resid,
        noise_v_plain=max(floor_us, spread["v_plain_us_per_event"]),
        noise_v_resid=max(floor_us, spread["v_resid_us_per_event"]),
        noise_w=spread["w_us_per_event"],
    )
    fig["w_us_per_offloaded_record"] = _round(_median([r["w_us_per_offloaded_record"] for r in repeats]), 3)
    fig["slopes_us_per_event"] = {
        k: _round(_median([r["slopes_us_per_event"][k] for r in repeats]), 3) for k in KINDS
    }
    return fig


def epoch_notes(epochs: Mapping[str, Sequence[int | None]]) -> list[str]:
    """What is wrong with a repeat's epoch counts (`epochs[kind]` = [at n1, at n2]): a variant whose two
    sizes cut different counts keeps some per-epoch cost in its slope."""
    return [
        f"{kind} cut {a} epochs at N1 but {b} at N2: its slope keeps some per-epoch cost"
        for kind, (a, b) in epochs.items()
        if a != b
    ]


# ---- VM CPU --------------------------------------------------------------------------------------


def tree_cpu_seconds(root_pid: int) -> float:
    """User + system CPU seconds of `root_pid` and every process under it, each with the children it has
    reaped: what the tree has spent so far, including processes that have exited and been waited for.

    A process that exits between listing the tree and reading it is skipped: its CPU moves to its
    parent's reaped-children times once the parent waits for it, which a later reading sees.
    """
    root = psutil.Process(root_pid)
    total = 0.0
    for proc in (root, *root.children(recursive=True)):
        with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
            t = proc.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
    return total


def jvm_pid() -> int:
    """The pid of the Spark JVM this process launched (its tree is the VM side)."""
    jvm = current_jvm()
    if jvm is None or jvm.proc is None:
        raise SpongeError(
            "this process did not launch its Spark JVM, so its CPU cannot be read",
            hint="run the bench in a fresh interpreter",
        )
    return jvm.proc.pid


# ---- runs ----------------------------------------------------------------------------------------


def run_sources_only(spark: Any, config: RunConfig) -> int:
    """The baseline: read the query's sources as its runs do, drop every record, end as they end.
    Returns the epochs that read data, counted as run_query counts its summary's `epochs`."""
    from pyspark.sql import functions as F

    sources = [n.op for n in get_query(config.query).plan(config.params).nodes if isinstance(n.op, Source)]
    out = config.output
    out.mkdir(parents=True)
    started = time.time()
    make = nexmark_sources(spark, config, pace_origin=started)
    frames: list[Any] = [make(src) for src in sources]  # pyspark DataFrames
    frames = [f.select(EVENT_TIME) for f in frames]
    df = functools.reduce(lambda a, b: a.union(b), frames)
    df = df.filter(F.col(EVENT_TIME) < F.lit(NEVER).cast("timestamp"))
    progress = stream_to_end(
        df,
        out,
        f"bench_sources_{config.query}_{int(started)}",
        len(sources),
        config.generator.events,
        timeout_s=config.timeout_s,
        started=started,
        memory=config.spark.memory,
    )
    return len(progress)


class _SessionHooks(RunHooks):
    """Keeps the run's offload session, whose agent's totals outlive the run."""

    def __init__(self) -> None:
        self.session: OffloadSession | None = None

    def started(self, spark: Any, session: OffloadSession | None, origin: float) -> None:
        self.session = session


def worker_seconds(summary: Mapping[str, Any], agent_totals: Mapping[str, int]) -> tuple[float | None, str]:
    """The workers' CPU seconds of a share-1.0 run and where they came from: the summary's
    `worker_cpu_s`, else the agent's totals' `worker_cpu_us`. None when neither has it, or when workers
    ran records but reported no CPU at all (a summary written from an agent without the counter records
    0, and so would an agent that drops the workers' figure): a 0 there would read as a share of 0."""
    ran = summary.get("records_offloaded", 0) > 0
    seconds = summary.get(SUMMARY_WORKER_CPU_S)
    if seconds is not None and (seconds > 0 or not ran):
        return float(seconds), f"summary {SUMMARY_WORKER_CPU_S}"
    us = agent_totals.get(AGENT_WORKER_CPU_US)
    if us is None or (us == 0 and ran):
        return None, "none"
    return us / 1_000_000, f"agent {AGENT_WORKER_CPU_US}"


@dataclass(frozen=True)
class Bench:
    """What every run of one bench invocation shares."""

    spark: Any
    spark_config: SparkConfig
    work: Path
    seed: int
    epochs: int
    workers: int
    timeout_s: float


def measure(bench: Bench, query: str, kind: str, events: int, label: str) -> dict[str, Any]:
    """One run of `kind` on `events` events cut into `bench.epochs` epochs: its VM CPU, wall time and
    epoch count (and the workers' CPU for the offloaded run)."""
    offload = None
    cap = batch_cap(events, bench.epochs)
    if kind == "offloaded":
        offload = OffloadConfig(share=1.0, workers=bench.workers, prewarm=bench.workers)
        cap = offloaded_cap(cap)
    config = RunConfig(
        query=query,
        generator=GeneratorConfig(seed=bench.seed, events=events),
        output=bench.work / f"{query}-{label}-{kind}-{events}",
        existing=Existing.REPLACE,  # a run of its own from an earlier call
        params=QueryParams(),
        max_events_per_batch=cap,
        spark=bench.spark_config,
        timeout_s=bench.timeout_s,
        offload=offload,
    )
    hooks = _SessionHooks()
    pid = jvm_pid()
    quiesce(bench.spark)
    before, started = tree_cpu_seconds(pid), time.time()
    summary: dict[str, Any] = {}
    if kind == "sources":
        epochs = run_sources_only(bench.spark, config)
    else:
        summary = run_query(config, hooks=hooks)
        epochs = summary.get("epochs")
    wall = time.time() - started
    quiesce(bench.spark)
    run: dict[str, Any] = {
        "events": events,
        "cpu_s": round(tree_cpu_seconds(pid) - before, 3),
        "wall_s": round(wall, 3),
        "max_events_per_batch": cap,
        "epochs": epochs,
    }
    if kind == "offloaded":
        totals = hooks.session.agent.totals() if hooks.session is not None else {}
        run["worker_s"], run["worker_cpu_from"] = worker_seconds(summary, totals)
        for key in (
            "records_offloaded",
            "records_run_locally_by_agent",
            "chunks_redispatched",
            "cold_starts",
        ):
            run[key] = summary.get(key, 0)
        run["operators_offloaded"] = summary.get("operators_offloaded", {})
    return run


def run_order(repeat: int) -> tuple[int, int]:
    """Which size a repeat runs first (0: N1, 1: N2): N1 first, then alternately, so that a drift over
    the bench (a machine warming up, another tenant's load) leans on neither size's runs in a median.
    Every variant runs at one size before any runs at the other, so each run follows a run of the same
    variant at both sizes (the warm-up's last variant for the first) and its slope pairs like with like."""
    return (0, 1) if repeat % 2 == 0 else (1, 0)


def _said(query: str, where: str, kind: str, run: Mapping[str, Any]) -> str:
    w = f", workers' CPU {run['worker_s']:.3f} s" if run.get("worker_s") is not None else ""
    return (
        f"{query} {where}: {kind} on {run['events']:,} events: VM CPU {run['cpu_s']:.2f} s in "
        f"{run['wall_s']:.1f} s, {run['epochs']} epochs{w}"
    )


def measure_query(
    bench: Bench,
    query: str,
    sizes: tuple[int, int],
    repeats: int,
    warmup_events: int,
    noise_cpu_s: float,
    say: Callable[[str], None],
) -> dict[str, Any]:
    """Warm-up runs, then `repeats` rounds of each variant at both sizes; the query's JSON entry."""
    n1, n2 = sizes
    fig: dict[str, Any] = {"query": query}
    rounds: list[dict[str, Any]] = []
    try:
        if warmup_events > 0:
            for kind in KINDS:
                say(_said(query, "warm-up", kind, measure(bench, query, kind, warmup_events, "warmup")))
        for i in range(repeats):
            runs: dict[str, list[dict[str, Any]]] = {k: [{}, {}] for k in KINDS}
            for j in run_order(i):
                for kind in KINDS:
                    runs[kind][j] = run = measure(bench, query, kind, sizes[j], f"r{i + 1}")
                    say(_said(query, f"repeat {i + 1}/{repeats}", kind, run))
            epochs = {k: [r["epochs"] for r in runs[k]] for k in KINDS}
            rounds.append({**repeat_figures(runs, n1, n2), "epochs": epochs, "runs": runs})
    except Exception as exc:  # one query's failure must not cost the others' figures
        fig["error"] = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
    if rounds:
        fig.update(median_figures(rounds, noise_floor_us(noise_cpu_s, n1, n2)))
        fig["epochs"] = rounds[-1]["epochs"]
        mismatches = {note for r in rounds for note in epoch_notes(r["epochs"])}
        fig["notes"] = sorted(mismatches) + fig["notes"]
        last = rounds[-1]["runs"]["offloaded"]
        order = [n.id for n in get_query(query).plan(QueryParams()).nodes]
        by_node = last[-1]["operators_offloaded"]
        fig["operators_offloaded"] = {k: by_node[k] for k in sorted(by_node, key=_position(order))}
        fig["records_offloaded"] = [r["records_offloaded"] for r in last]
        fig["worker_cpu_from"] = sorted(
            {r["worker_cpu_from"] for rnd in rounds for r in rnd["runs"]["offloaded"]}
        )
        fig["records_run_locally_by_agent"] = max(
            r["records_run_locally_by_agent"] for rnd in rounds for r in rnd["runs"]["offloaded"]
        )
        if fig["records_run_locally_by_agent"]:
            fig["notes"].append(
                f"the agent ran {fig['records_run_locally_by_agent']:,} records itself (not in W)"
            )
        if fig["w_us_per_event"] is None and "error" not in fig:
            fig["error"] = (
                f"no workers' CPU: neither the summary's {SUMMARY_WORKER_CPU_S} nor the agent's "
                f"{AGENT_WORKER_CPU_US} although workers ran {max(fig['records_offloaded']):,} records "
                "(does the agent pass each Result's CPU time to Dispatcher.on_result?)"
            )
    fig["repeats"] = rounds
    return fig


def _position(order: Sequence[str]) -> Callable[[str], tuple[int, str]]:
    """Sort key: a node's place in the plan (ids the plan does not know last, by name)."""
    return lambda node_id: (order.index(node_id) if node_id in order else len(order), node_id)


# ---- output --------------------------------------------------------------------------------------


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else fmt.format(x)


def _epochs_cell(epochs: Mapping[str, Sequence[int | None]] | None) -> str:
    """`s 6/6 p 6/6 o 6/6`: each variant's epochs at N1/N2, so a reader sees they match."""
    if not epochs:
        return "-"
    return " ".join(f"{k[0]} {'/'.join(str(e) for e in v)}" for k, v in epochs.items())


def render_table(report: Mapping[str, Any]) -> Any:
    from rich.table import Table

    table = Table(
        title=f"offloaded CPU share per record at offload share 1.0: slopes between "
        f"{report['events_small']:,} and {report['events_large']:,} events, {report['epochs']} epochs each "
        f"(seed {report['seed']}), {report['workers']} workers, median of {report['repeats']} repeat(s); "
        "figures in us of CPU per event"
    )
    columns = (
        "query",
        "W",
        "V_plain",
        "V_resid",
        "share",
        "vm_cpu_taken",
        "noise V",
        "W per off. rec",
        "epochs s/p/o",
        "note",
    )
    for name in columns:
        table.add_column(name, justify="left" if name in ("query", "epochs s/p/o", "note") else "right")
    for q in report["queries"]:
        notes = ([q["error"]] if q.get("error") else []) + list(q.get("notes") or [])
        noise = q.get("noise_us_per_event") or {}
        table.add_row(
            q["query"],
            _num(q.get("w_us_per_event"), "{:.3f}"),
            _num(q.get("v_plain_us_per_event"), "{:.3f}"),
            _num(q.get("v_resid_us_per_event"), "{:.3f}"),
            _num(q.get("share"), "{:.3f}"),
            _num(q.get("vm_cpu_taken"), "{:.3f}"),
            _num(noise.get("v_plain"), "{:.3f}"),
            _num(q.get("w_us_per_offloaded_record"), "{:.3f}"),
            _epochs_cell(q.get("epochs")),
            "; ".join(notes),
        )
    return table


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.offloaded_share", description=(__doc__ or "").splitlines()[0]
    )
    ap.add_argument(
        "--queries", default=",".join(DEFAULT_QUERIES), help="comma-separated, from " + ",".join(QUERIES)
    )
    ap.add_argument(
        "--events", type=int, default=60_000, help="events of the small runs, N1 (default 60,000)"
    )
    ap.add_argument(
        "--events-large", type=int, default=None, help="events of the large runs, N2 (default 3 x --events)"
    )
    ap.add_argument(
        "--epochs", type=int, default=6, help="micro-batches of every run at both sizes (default 6)"
    )
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=2, help="Lambda workers of the share-1.0 run (default 2)")
    ap.add_argument("--repeats", type=int, default=1, help="measured rounds per query; figures are medians")
    ap.add_argument(
        "--noise-cpu-s",
        type=float,
        default=0.25,
        help="assumed noise of one run's VM CPU seconds, for the V figures' noise (default 0.25)",
    )
    ap.add_argument(
        "--warmup-events",
        type=int,
        default=None,
        help="events of the unmeasured warm-up runs (default --events; 0: none)",
    )
    ap.add_argument("--timeout", type=float, default=900.0, help="seconds one run may take")
    ap.add_argument(
        "--work",
        type=Path,
        default=None,
        help="keep the runs' outputs and the JVM's log in a new directory under DIR "
        "(default: a temp dir, removed at the end)",
    )
    ap.add_argument("--json", action="store_true", help="end stdout with the figures as one JSON line")
    args = ap.parse_args(argv)
    args.queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in args.queries if q not in QUERIES]
    if unknown or not args.queries:
        ap.error(f"unknown queries {', '.join(unknown)}; choose from {', '.join(QUERIES)}")
    if args.events < 1 or args.epochs < 1 or args.workers < 1 or args.repeats < 1:
        ap.error("--events, --epochs, --workers and --repeats must be at least 1")
    if args.epochs > args.events:
        ap.error("--epochs must not exceed --events: an epoch holds at least one event")
    args.events_large = 3 * args.events if args.events_large is None else args.events_large
    if args.events_large <= args.events:
        ap.error("--events-large must exceed --events: the figures are slopes between the two")
    if not (args.noise_cpu_s >= 0 and math.isfinite(args.noise_cpu_s)):
        ap.error("--noise-cpu-s must be a finite number >= 0")
    args.warmup_events = args.events if args.warmup_events is None else args.warmup_events
    if args.warmup_events < 0:
        ap.error("--warmup-events must be >= 0")
    return args


def run_bench(args: argparse.Namespace, say: Callable[[str], None] = _say) -> dict[str, Any]:
    started = time.time()
    figures = []
    sizes = (args.events, args.events_large)
    with tempfile.TemporaryDirectory(prefix="sponge-bench-offloaded-share-") as tmp:
        if args.work is not None:  # a directory of our own inside the user's: nothing there is touched
            args.work.mkdir(parents=True, exist_ok=True)
            work = Path(tempfile.mkdtemp(prefix="offloaded-share-", dir=args.work))
        else:
            work = Path(tmp)
        say(f"work directory {work}")
        sc = SparkConfig(app_name="sponge-bench-offloaded-share", jvm_log=work / "jvm.log")
        spark = spark_session(sc)
        bench = Bench(spark, sc, work, args.seed, args.epochs, args.workers, args.timeout)
        try:
            for q in args.queries:
                t0 = time.time()
                say(f"{q}: start: {sizes[0]:,} and {sizes[1]:,} events, {args.epochs} epochs, "
                    f"{args.repeats} repeat(s)")  # fmt: skip
                fig = measure_query(bench, q, sizes, args.repeats, args.warmup_events, args.noise_cpu_s, say)
                figures.append(fig)
                say(
                    f"{q}: end in {time.time() - t0:.0f} s: share {_num(fig.get('share'), '{:.3f}')}, "
                    f"vm_cpu_taken {_num(fig.get('vm_cpu_taken'), '{:.3f}')}"
                    + (f"; FAILED: {fig['error']}" if fig.get("error") else "")
                )
        finally:
            with contextlib.suppress(Exception):  # a JVM that died has nothing left to stop
                spark.stop()
    return {
        "method": METHOD,
        "events_small": sizes[0],
        "events_large": sizes[1],
        "epochs": args.epochs,
        "seed": args.seed,
        "workers": args.workers,
        "repeats": args.repeats,
        "noise_cpu_s": args.noise_cpu_s,
        "warmup_events": args.warmup_events,
        "master": sc.master,
        "shuffle_partitions": sc.shuffle_partitions,
        "cores": len(os.sched_getaffinity(0)),
        "work": str(work) if args.work is not None else None,
        "elapsed_s": round(time.time() - started, 1),
        "queries": figures,
    }


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    report = run_bench(args)
    return finish(report, render_table(report), METHOD, args.json)


if __name__ == "__main__":
    sys.exit(main())

"""Offloaded path per worker core against the VM path per core (Q1, Q5), dispatch round trip, worker starts.

Run:  .venv/bin/python -m bench.offload [--queries q1,q5] [--events N] [--worker-events N] [--rounds R]

Why: the scaling policy sizes an offload with rho = (events/s one Lambda worker core sustains on a
query's transient program) / (events/s one VM core sustains on the whole query in Spark). Both are
measured here, on the same machine, in the same run, interleaved, each on a core of its own:

  VM path      Spark local[1] running the compiled (rewritten) plan on generated events, exactly as
               bench.throughput's variant (a) (its run_variant and steady_state): events / summed
               triggerExecution of the micro-batches with events, the first (warm-up) batch left out.
               The bench process is pinned to --vm-cpu before Spark starts, so the JVM and Spark's
               Python workers inherit it.
  worker path  an in-process AgentServer (pinned, with the client, to --vm-cpu) with an EmbeddedFleet
               of ONE prewarmed worker process pinned to --worker-cpu; --in-flight client threads push
               the bids of --worker-events events through AgentClient.offload in chunks of --chunk-rows,
               so that a next chunk is always queued at the agent. Rate = bid rows / wall time of the
               whole pass, end to end: encode, gRPC to the agent, dispatch to the worker, decode, the
               polars program, encode back, and the way home.
               Programs: q1 = ("map1",); q5 = ("map1", "key_by2", "window_aggregate3"), whose output is
               the per-pane partial count (window 10 s, slide 2 s).

Units: a bid-only query in Spark reads every NEXMark event index but only the bids among them (46 of
every 50) become rows, so the VM rate is converted to bids/s (events/s x 46/50) and both paths are
compared in bid rows per second; rho = worker bids/s / VM bids/s (ratio of the medians over rounds).

Where the worker figure is bounded by something else than the worker: a worker holds one chunk at a
time, so it idles while the agent turns a result into the next dispatch, and the agent and client
share one core. "worker busy" is the worker process's CPU time / wall time (from /proc): below ~0.95 the
end-to-end rate is limited by that turnaround or by the agent's core, not by the worker's. "bids per
worker CPU-s" (and rho_cpu) is the worker's capacity if it were never idle; "agent core busy" is the
bench process's CPU time / wall time during the pass (client + agent threads; 1.0 = that core is full).
"program only" runs decode + program + encode of the same chunks in the bench process (no gRPC): the
ceiling of the worker path on one core.

Correctness: before measuring, the worker's output for two sample chunks (first and middle) must equal
TransientProgram.run on the same chunks here (core.results.diff_results); every measured chunk must be
answered by the worker (never by the agent's local fallback, which is pushed out of reach).

Dispatch round trip (1 MB chunks, p50/p99) and worker start (cold: a new process; warm: an idle
process reused) come from router.measure.measure (program q5, one worker), called once per round in a
fresh spawned process with every allowed core, so its agent and fleet share nothing with this one.
Figures are medians over the rounds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import secrets
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from core.nexmark.generator import PROPORTION_DENOMINATOR, GeneratorConfig, event_ids, generate
from core.nexmark.params import QueryParams
from core.nexmark.schedule import RateSchedule
from core.results import diff_results
from core.wire.arrow_ipc import decode, encode
from lambda_worker.program import ProgramSpec
from router.agent import AgentConfig, AgentServer
from router.client import AgentClient
from router.dispatcher import DispatchConfig
from router.fleet import FleetConfig
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig

PARAMS = QueryParams(window_size_s=10, window_slide_s=2)
PROGRAMS: dict[str, ProgramSpec] = {
    "q1": ProgramSpec("q1", ("map1",), PARAMS.window_size_s, PARAMS.window_slide_s),
    "q5": ProgramSpec(
        "q5", ("map1", "key_by2", "window_aggregate3"), PARAMS.window_size_s, PARAMS.window_slide_s
    ),
}
# Bids among the event indices [0, 50): every full block of 50 events holds the same share.
BID_SHARE = len(event_ids("bid", 0, PROPORTION_DENOMINATOR)) / PROPORTION_DENOMINATOR
EVENT_RATE = 10_000.0  # events/s of event time (docs/queries.md default), on both paths
MIN_VM_BATCHES = 5  # the first batch is not measured: keep at least 4 measured ones
METHOD = (
    "VM: Spark local[1] on one pinned core, compiled plan, events / sum(triggerExecution) of the batches "
    "with events except the first, converted to bids/s (x46/50); worker: one prewarmed embedded-fleet "
    "worker on its own pinned core, bid rows / wall time of a pass through AgentClient.offload with "
    "several chunks in flight (agent and client on the VM core); rho = worker bids/s / VM bids/s, "
    "medians over interleaved rounds"
)


# ---- cores --------------------------------------------------------------------------------------


def pin_process(cpus: set[int]) -> None:
    """Pin every thread of this process to `cpus`.

    Why every thread: Linux affinity is per thread and inherited at thread or process creation, so
    pinning only the calling thread would leave threads some import already started on every core;
    after this, the Spark JVM, its Python workers and the agent's gRPC threads all start on `cpus`.
    """
    for tid in os.listdir("/proc/self/task"):
        with contextlib.suppress(ProcessLookupError):  # a thread that ended meanwhile
            os.sched_setaffinity(int(tid), cpus)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of process `pid` (all its threads) from /proc, in seconds."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


# ---- VM path ------------------------------------------------------------------------------------


@dataclass
class VmRun:
    events: int
    ms: int
    batches: int
    wall_s: float
    events_per_s: float

    @property
    def bids_per_s(self) -> float:
        return self.events_per_s * BID_SHARE


def vm_batch_events(events: int, batch_events: int) -> int:
    """Events per micro-batch: --batch-events, lowered for small runs so that >= 4 batches are measured."""
    return max(1, min(batch_events, events // MIN_VM_BATCHES))


def run_vm(spark: Any, query: str, events: int, batch_events: int, seed: int, work: Path) -> VmRun:
    """One steady-state run of the compiled plan, through bench.throughput's own variant (a)."""
    from bench.throughput import run_variant
    from core.spark.runner import RunConfig

    config = RunConfig(
        query=query,
        generator=GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.constant(EVENT_RATE)),
        output=work / f"vm_{query}",
        params=PARAMS,
        max_events_per_batch=vm_batch_events(events, batch_events),
        spark=spark_config(),
        plain=False,
    )
    m = run_variant(spark, "a", config)
    return VmRun(m.events, m.ms, m.batches, m.wall_s, m.events_per_s)


def spark_config() -> Any:
    from core.spark.session import SparkConfig

    return SparkConfig(master="local[1]", shuffle_partitions=1, app_name="sponge-bench-offload")


# ---- worker path --------------------------------------------------------------------------------


def bid_chunks(seed: int, events: int, chunk_rows: int) -> list[pa.Table]:
    """The bids among events [0, events) at EVENT_RATE, cut into tables of `chunk_rows` rows."""
    gen = GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.constant(EVENT_RATE))
    bids = pa.Table.from_batches([generate(gen, "bid", 0, events)])
    return [bids.slice(i, chunk_rows) for i in range(0, bids.num_rows, chunk_rows)]


@dataclass
class WorkerRun:
    rows: int
    chunks: int
    wall_s: float
    worker_cpu_s: float
    agent_cpu_s: float
    bids_per_s: float
    redispatches: int

    @property
    def worker_busy(self) -> float:
        return self.worker_cpu_s / self.wall_s

    @property
    def agent_busy(self) -> float:
        return self.agent_cpu_s / self.wall_s

    @property
    def bids_per_worker_cpu_s(self) -> float:
        return self.rows / self.worker_cpu_s if self.worker_cpu_s > 0 else float("nan")


class WorkerRig:
    """An agent with a one-worker embedded fleet pinned to `worker_cpu`, and a client on it.

    Why one long-lived rig: the worker process stays warm across rounds (as Lambda keeps a warm
    environment), so the passes measure steady throughput, not starts; starts are measured apart.
    The local fallback is set far beyond any queueing delay here: a chunk run in the agent would be
    VM-core work counted as worker work.
    """

    def __init__(self, worker_cpu: int, log_path: Path) -> None:
        self.secret = secrets.token_hex(16).encode()
        self.fleet = EmbeddedFleet(
            EmbeddedFleetConfig(
                concurrency_limit=1,
                cpus=(worker_cpu,),
                timeout_s=900.0,  # Lambda's maximum: no session ends on its deadline mid-pass
                log_path=str(log_path),
            )
        )
        self.agent = AgentServer(
            AgentConfig(
                secret=self.secret,
                dispatch=DispatchConfig(chunk_timeout_s=120.0, local_fallback_s=600.0),
                fleet=FleetConfig(max_workers=1, idle_timeout_s=60.0),
            ),
            self.fleet,
        )
        self.client: AgentClient | None = None
        self._epoch = 0

    def __enter__(self) -> WorkerRig:
        self.agent.start()
        self.client = AgentClient(self.agent.address, self.secret)
        return self

    def __exit__(self, *exc: object) -> None:
        if self.client is not None:
            self.client.close()
        self.agent.stop()

    def prewarm(self, specs: Sequence[ProgramSpec]) -> None:
        """Start the worker process and compile every program in it before anything is timed."""
        for spec in specs:
            if self.fleet.prewarm(1, spec.to_json()) != 1:
                raise RuntimeError("the embedded worker did not warm up (see the worker log)")

    def next_epoch(self) -> int:
        """A fresh epoch per pass: the agent caches results by (epoch, partition, chunk_seq, program)."""
        self._epoch += 1
        return self._epoch

    def worker_pids(self) -> list[int]:
        return [e.pid for e in self.fleet.environments() if e.alive]

    def offload_all(self, spec: ProgramSpec, chunks: Sequence[pa.Table], in_flight: int) -> list[Any]:
        assert self.client is not None
        client, epoch = self.client, self.next_epoch()
        with ThreadPoolExecutor(in_flight, thread_name_prefix="bench-offload") as pool:
            return list(pool.map(lambda ic: client.offload(epoch, 0, ic[0], spec, ic[1]), enumerate(chunks)))

    def run(self, spec: ProgramSpec, chunks: Sequence[pa.Table], in_flight: int) -> WorkerRun:
        """One timed pass of all `chunks`, after a few untimed chunks that get the worker connected."""
        self.offload_all(spec, chunks[:in_flight], in_flight)
        pids = self.worker_pids()
        w0 = sum(cpu_seconds(p) for p in pids)
        c0 = time.process_time()
        t0 = time.perf_counter()
        results = self.offload_all(spec, chunks, in_flight)
        wall = time.perf_counter() - t0
        agent_cpu = time.process_time() - c0
        worker_cpu = sum(cpu_seconds(p) for p in pids if os.path.exists(f"/proc/{p}")) - w0
        local = sum(r.ran_locally for r in results)
        if local or set(self.worker_pids()) != set(pids):
            raise RuntimeError(
                f"{spec.query}: {local} chunk(s) ran in the agent or the worker process changed mid-pass; "
                "the pass did not measure one worker"
            )
        rows = sum(r.rows_in for r in results)
        return WorkerRun(
            rows,
            len(results),
            wall,
            worker_cpu,
            agent_cpu,
            rows / wall,
            sum(r.redispatches for r in results),
        )

    def check(self, spec: ProgramSpec, chunks: Sequence[pa.Table]) -> str:
        """'checked' when the worker's output for two sample chunks equals the program run here."""
        samples = [chunks[0], chunks[len(chunks) // 2]]
        got = self.offload_all(spec, samples, 1)
        program = spec.compile()
        for i, (chunk, result) in enumerate(zip(samples, got, strict=True)):
            if result.ran_locally:
                return f"UNCHECKED: sample {i} ran in the agent, not on the worker"
            expected = pa.Table.from_batches([program.run(chunk)])
            problem = diff_results(result.table, expected)
            if problem is not None:
                return f"MISMATCH (sample {i}, worker vs local): {problem}"
            if result.table.num_rows == 0:
                return f"UNCHECKED: sample {i} produced no rows"
        return "checked"


def program_only(spec: ProgramSpec, chunks: Sequence[pa.Table]) -> float:
    """Bid rows/s of decode + program + encode on this core, no gRPC: the worker path's ceiling."""
    program = spec.compile()
    payloads = [encode(c, "zstd") for c in chunks]
    t0 = time.perf_counter()
    for p in payloads:
        encode(program.run_table(decode(p)), "zstd")
    return sum(c.num_rows for c in chunks) / (time.perf_counter() - t0)


# ---- dispatch round trip and worker starts -------------------------------------------------------


def _measure_in_child(cpus: list[int], rounds: int, log_path: str) -> dict[str, Any]:
    """router.measure.measure in a fresh process on every allowed core, worker logs to `log_path`."""
    os.sched_setaffinity(0, set(cpus))
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 2)  # the workers inherit stderr: keep their logs and metrics off the bench's console
    from router.measure import measure

    return measure(chunk_mb=1.0, rounds=rounds, workers=1, program="q5", local=False)


def measure_dispatch(cpus: set[int], rounds: int, log_path: Path) -> dict[str, Any]:
    """1 MB Offload round trips and cold/warm worker starts, by router.measure, isolated in a process.

    Why a spawned process: router.measure starts its own agent and fleet; here they would inherit this
    process's pinning (every worker on the VM core) and its gRPC threads.
    """
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(1, mp_context=ctx) as pool:
        return pool.submit(_measure_in_child, sorted(cpus), rounds, str(log_path)).result()


# ---- report -------------------------------------------------------------------------------------


def _ratio(x: float, y: float) -> float:
    return x / y if y > 0 else float("nan")


def _median(xs: Sequence[float | None]) -> float:
    """The median of the values that exist (a start router.measure did not observe is None)."""
    values = [x for x in xs if x is not None]
    return statistics.median(values) if values else float("nan")


def summarize_query(
    vm: list[VmRun], worker: list[WorkerRun], prog: list[float], check: str
) -> dict[str, Any]:
    """The per-query figures of the report: medians over rounds, rho as the ratio of the medians."""
    vm_events = _median([r.events_per_s for r in vm])
    vm_bids = vm_events * BID_SHARE
    w_bids = _median([r.bids_per_s for r in worker])
    w_cpu = _median([r.bids_per_worker_cpu_s for r in worker])
    return {
        "vm_events_per_s": vm_events,
        "vm_bids_per_s": vm_bids,
        "worker_bids_per_s": w_bids,
        "rho": _ratio(w_bids, vm_bids),
        "rho_per_round": [_ratio(w.bids_per_s, v.bids_per_s) for v, w in zip(vm, worker, strict=True)],
        "worker_busy": _median([r.worker_busy for r in worker]),
        "worker_bids_per_cpu_s": w_cpu,
        "rho_cpu": _ratio(w_cpu, vm_bids),
        "agent_core_busy": _median([r.agent_busy for r in worker]),
        "program_only_bids_per_s": _median(prog),
        "check": check,
        "runs": {
            "vm": [{**asdict(r), "bids_per_s": r.bids_per_s} for r in vm],
            "worker": [
                {
                    **asdict(r),
                    "worker_busy": r.worker_busy,
                    "agent_busy": r.agent_busy,
                    "bids_per_worker_cpu_s": r.bids_per_worker_cpu_s,
                }
                for r in worker
            ],
            "program_only_bids_per_s": prog,
        },
    }


def summarize_dispatch(runs: list[dict[str, Any]]) -> dict[str, Any]:
    first = runs[0]
    return {
        "source": "router.measure.measure(chunk_mb=1.0, workers=1, program='q5'), a new process per round",
        "chunk_rows": first["chunk_rows"],
        "chunk_arrow_mb": first["chunk_arrow_mb"],
        "chunk_ipc_zstd_mb": first["chunk_ipc_zstd_mb"],
        "offload_p50_ms": _median([r["offload_p50_ms"] for r in runs]),
        "offload_p99_ms": _median([r["offload_p99_ms"] for r in runs]),
        "worker_start_cold_s": _median([r.get("worker_start_cold_s") for r in runs]),
        "worker_start_warm_s": _median([r.get("worker_start_warm_s") for r in runs]),
        "runs": runs,
    }


# ---- main ---------------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.offload",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
        epilog="Figures are printed as tables and written to --json; see the module doc for the method.",
    )
    ap.add_argument("--queries", default="q1,q5", help="comma-separated, from " + ",".join(PROGRAMS))
    ap.add_argument(
        "--events",
        type=int,
        default=1_000_000,
        help="VM path: NEXMark events per measured Spark run (all entities; 46/50 of them are bids)",
    )
    ap.add_argument(
        "--batch-events",
        type=int,
        default=200_000,
        help="VM path: max events per micro-batch (lowered for small --events so 4 batches are measured)",
    )
    ap.add_argument(
        "--worker-events",
        type=int,
        default=1_000_000,
        help="worker path: NEXMark events whose bids (46/50 of them) go through the worker per pass",
    )
    ap.add_argument("--chunk-rows", type=int, default=16_384, help="worker path: bid rows per Offload chunk")
    ap.add_argument(
        "--in-flight",
        type=int,
        default=4,
        help="worker path: concurrent Offload calls, so that a next chunk always waits at the agent",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds (VM and worker runs of every query, then a dispatch measurement); "
        "figures are medians over rounds",
    )
    ap.add_argument(
        "--dispatch-rounds",
        type=int,
        default=200,
        help="1 MB Offload round trips per round for p50/p99 (router.measure --rounds)",
    )
    ap.add_argument(
        "--vm-cpu",
        type=int,
        default=None,
        help="core of Spark, the agent and the client (default: the first allowed core)",
    )
    ap.add_argument(
        "--worker-cpu",
        type=int,
        default=None,
        help="core of the worker process (default: the second allowed core)",
    )
    ap.add_argument("--seed", type=int, default=1, help="generator seed (both paths)")
    ap.add_argument(
        "--json", type=Path, default=Path("runs/bench/offload.json"), help="where to write figures"
    )
    ap.add_argument(
        "--work-dir",
        type=Path,
        default=Path("runs/bench/offload-work"),
        help="Spark outputs and worker logs while running (removed at the end)",
    )
    args = ap.parse_args(argv)
    args.queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in args.queries if q not in PROGRAMS]
    if unknown or not args.queries:
        named = ", ".join(unknown) or "(none)"
        ap.error(f"no transient program for {named}; choose from {', '.join(PROGRAMS)}")
    positive = (
        "events",
        "batch_events",
        "worker_events",
        "chunk_rows",
        "in_flight",
        "rounds",
        "dispatch_rounds",
    )
    for name in positive:
        if getattr(args, name) <= 0:
            ap.error(f"--{name.replace('_', '-')} must be positive")
    if args.events < MIN_VM_BATCHES:
        ap.error(f"--events must be at least {MIN_VM_BATCHES}")
    allowed = sorted(os.sched_getaffinity(0))
    args.allowed = allowed
    args.vm_cpu = allowed[0] if args.vm_cpu is None else args.vm_cpu
    if args.worker_cpu is None:
        rest = [c for c in allowed if c != args.vm_cpu]
        if not rest:
            ap.error("this bench needs two cores (one for the VM path, one for the worker); only one allowed")
        args.worker_cpu = rest[0]
    if args.vm_cpu == args.worker_cpu or not {args.vm_cpu, args.worker_cpu} <= set(allowed):
        ap.error(f"--vm-cpu and --worker-cpu must be two different cores among {allowed}")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 160)
    work: Path = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    worker_log = work / "workers.log"
    started = time.time()

    def say(text: str) -> None:
        console.print(f"[{time.time() - started:6.1f} s] {text}", highlight=False)

    # Pin before Spark and the agent start anything, so every thread and child inherits the VM core.
    pin_process({args.vm_cpu})
    say(f"VM path and agent on core {args.vm_cpu}, worker on core {args.worker_cpu} (allowed {args.allowed})")
    say(f"generating the bids of {args.worker_events:,} events in chunks of {args.chunk_rows:,} rows ...")
    chunks = bid_chunks(args.seed, args.worker_events, args.chunk_rows)
    say(f"{sum(c.num_rows for c in chunks):,} bids in {len(chunks)} chunks; starting Spark local[1] ...")

    from core.spark.session import spark_session

    spark = spark_session(spark_config())
    specs = [PROGRAMS[q] for q in args.queries]
    vm_runs: dict[str, list[VmRun]] = {q: [] for q in args.queries}
    worker_runs: dict[str, list[WorkerRun]] = {q: [] for q in args.queries}
    prog_runs: dict[str, list[float]] = {q: [] for q in args.queries}
    checks: dict[str, str] = {}
    dispatch_runs: list[dict[str, Any]] = []
    try:
        with WorkerRig(args.worker_cpu, worker_log) as rig:
            say("prewarming the worker (process start, imports, programs) ...")
            rig.prewarm(specs)
            warm_events = min(args.events, 200_000)
            for q in args.queries:
                say(f"{q}: warm-up Spark run on {warm_events:,} events; worker check on 2 sample chunks ...")
                run_vm(spark, q, warm_events, args.batch_events, args.seed, work)
                checks[q] = rig.check(PROGRAMS[q], chunks)
                rig.run(PROGRAMS[q], chunks, args.in_flight)  # warm-up pass
                say(f"{q}: worker output vs local program: {checks[q]}")
            for r in range(args.rounds):
                for i, q in enumerate(args.queries):
                    order = ("vm", "worker") if (r + i) % 2 == 0 else ("worker", "vm")
                    for path in order:
                        if path == "vm":
                            vm = run_vm(spark, q, args.events, args.batch_events, args.seed, work)
                            vm_runs[q].append(vm)
                            say(
                                f"round {r + 1}/{args.rounds} {q} VM: {vm.events_per_s:,.0f} events/s "
                                f"= {vm.bids_per_s:,.0f} bids/s ({vm.batches} batches)"
                            )
                        else:
                            w = rig.run(PROGRAMS[q], chunks, args.in_flight)
                            worker_runs[q].append(w)
                            say(
                                f"round {r + 1}/{args.rounds} {q} worker: {w.bids_per_s:,.0f} bids/s "
                                f"(worker busy {w.worker_busy:.2f}, agent core busy {w.agent_busy:.2f})"
                            )
                    prog_runs[q].append(program_only(PROGRAMS[q], chunks))
                    say(f"round {r + 1}/{args.rounds} {q} program only: {prog_runs[q][-1]:,.0f} bids/s")
                say(f"round {r + 1}/{args.rounds}: 1 MB dispatch round trips and worker starts ...")
                d = measure_dispatch(set(args.allowed), args.dispatch_rounds, worker_log)
                dispatch_runs.append(d)
                say(
                    f"round {r + 1}/{args.rounds}: round trip p50 {d['offload_p50_ms']} ms, "
                    f"p99 {d['offload_p99_ms']} ms; start cold {d.get('worker_start_cold_s')} s, "
                    f"warm {d.get('worker_start_warm_s')} s"
                )
    finally:
        spark.stop()
    elapsed = time.time() - started

    queries = {q: summarize_query(vm_runs[q], worker_runs[q], prog_runs[q], checks[q]) for q in args.queries}
    dispatch = summarize_dispatch(dispatch_runs)
    report = {
        "method": METHOD,
        "bid_share": BID_SHARE,
        "cores": {"allowed": args.allowed, "vm": args.vm_cpu, "worker": args.worker_cpu},
        "config": {
            "events": args.events,
            "vm_batch_events": vm_batch_events(args.events, args.batch_events),
            "worker_events": args.worker_events,
            "worker_bids": sum(c.num_rows for c in chunks),
            "chunk_rows": args.chunk_rows,
            "chunks": len(chunks),
            "in_flight": args.in_flight,
            "rounds": args.rounds,
            "dispatch_rounds": args.dispatch_rounds,
            "seed": args.seed,
            "event_rate": EVENT_RATE,
            "window_size_s": PARAMS.window_size_s,
            "window_slide_s": PARAMS.window_slide_s,
            "programs": {q: PROGRAMS[q].to_json() for q in args.queries},
        },
        "elapsed_s": round(elapsed, 1),
        "queries": queries,
        "dispatch": dispatch,
    }

    table = Table(
        title=f"VM path per core (Spark local[1], {args.events:,} events) vs offloaded path per worker core "
        f"({report['config']['worker_bids']:,} bids in {args.chunk_rows:,}-row chunks, {args.in_flight} in "
        f"flight), median of {args.rounds} rounds"
    )
    left = ("query", "check")
    for name in (
        "query",
        "VM events/s",
        "VM bids/s",
        "worker bids/s",
        "rho",
        "rho per round",
        "worker busy",
        "bids/worker CPU-s",
        "rho_cpu",
        "agent core busy",
        "program only bids/s",
        "check",
    ):
        table.add_column(name, justify="left" if name in left else "right")
    for q, s in queries.items():
        per_round = s["rho_per_round"]
        table.add_row(
            q,
            f"{s['vm_events_per_s']:,.0f}",
            f"{s['vm_bids_per_s']:,.0f}",
            f"{s['worker_bids_per_s']:,.0f}",
            f"{s['rho']:.2f}",
            f"{min(per_round):.2f}-{max(per_round):.2f}",
            f"{s['worker_busy']:.2f}",
            f"{s['worker_bids_per_cpu_s']:,.0f}",
            f"{s['rho_cpu']:.2f}",
            f"{s['agent_core_busy']:.2f}",
            f"{s['program_only_bids_per_s']:,.0f}",
            s["check"].splitlines()[0],
        )
    console.print(table)
    dtable = Table(
        title=f"dispatch and worker start (router.measure, q5, {dispatch['chunk_rows']:,}-row chunk = "
        f"{dispatch['chunk_arrow_mb']} MB Arrow / {dispatch['chunk_ipc_zstd_mb']} MB IPC zstd), "
        f"median of {args.rounds} rounds"
    )
    for name in ("round trip p50 ms", "round trip p99 ms", "cold start s", "warm start s"):
        dtable.add_column(name, justify="right")
    dtable.add_row(
        f"{dispatch['offload_p50_ms']:.2f}",
        f"{dispatch['offload_p99_ms']:.2f}",
        f"{dispatch['worker_start_cold_s']:.3f}",
        f"{dispatch['worker_start_warm_s']:.3f}",
    )
    console.print(dtable)
    console.print(f"method: {METHOD}", highlight=False)
    console.print(
        "rho = worker bids/s / VM bids/s; rho_cpu uses bids per worker CPU-second (the worker never idle); "
        "busy = CPU time / wall time of the worker process / of this process (agent + client); "
        "program only = decode + program + encode here, no gRPC",
        highlight=False,
    )
    console.print(f"total bench time {elapsed:.0f} s", highlight=False)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"figures written to {args.json}", highlight=False)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(c == "checked" for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

"""Offloaded path per worker core against the VM path per core (Q1, Q5), dispatch round trip, worker starts.

Run:  .venv/bin/python -m bench.offload [--queries q1,q5] [--events N] [--worker-events N] [--rounds R]

Why: the scaling policy sizes an offload with rho = (events/s one Lambda worker core sustains on a
query's transient program) / (events/s one VM core sustains on the whole query in Spark). Both are
measured here, on the same machine, in the same run, interleaved, each on a core of its own:

  VM path      Spark local[1] running the compiled (rewritten) plan on generated events, exactly as
               bench.throughput's variant (a) (bench/throughput_variants.py: run_variant and
               steady_state): events / summed triggerExecution of the micro-batches with events, the first
               (warm-up) batch left out.
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
import json
import os
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.offload_figures import METHOD, summarize_dispatch, summarize_query
from bench.offload_rigs import (
    BID_SHARE,
    EVENT_RATE,
    MIN_VM_BATCHES,
    PARAMS,
    PROGRAMS,
    VmRun,
    WorkerRig,
    WorkerRun,
    bid_chunks,
    measure_dispatch,
    pin_process,
    program_only,
    run_vm,
    spark_config,
    vm_batch_events,
)


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

    from bench.offload_render import print_report

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

    print_report(console, report, elapsed)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"figures written to {args.json}", highlight=False)
    shutil.rmtree(work, ignore_errors=True)
    return 0 if all(c == "checked" for c in checks.values()) else 1


if __name__ == "__main__":
    sys.exit(main())

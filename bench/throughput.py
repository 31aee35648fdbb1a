"""Steady-state throughput of our compiled plan against the plain plan and hand-written PySpark.

Run:  .venv/bin/python -m bench.throughput [--events N] [--queries q1,q2,q5] [--repeats R] [--json PATH]

What is compared, per NEXMark query, on Spark `local[1]` (one core, so no variant can hide work on a
second one) in ONE SparkSession:

  (a) ours   the rewritten DAG (Sponge's operator insertion) lowered with inactive proxies:
             `run_query(RunConfig(..., plain=False))`;
  (b) plain  the logical DAG lowered without any proxy: `run_query(RunConfig(..., plain=True))`;
  (c) native the query written by hand in PySpark Structured Streaming (bench/native_queries.py),
             started by a small loop (bench/throughput_variants.py) that mirrors run_query (same
             sources from `core.spark.streams.nexmark_sources`, same Parquet sink, trigger and
             output mode).

Method:
* The variants run interleaved, one run of each per round, for R rounds, so that drifts of a noisy
  machine hit all three alike; each figure is the median over the R rounds. The order rotates from
  round to round (a,b,c / b,c,a / c,a,b / ...; --fixed-order keeps a,b,c), so that no variant is
  always the one that runs first, right after another query or the checks.
* Throughput is steady state: events / sum of `triggerExecution` of the micro-batches that carry
  events, EXCLUDING the first micro-batch (JIT, Python workers and codegen warm up there) and the
  tail batches that only carry the end-of-stream punctuation or close the last windows (no events;
  in steady state each batch also emits the windows its predecessor closed, so emission is counted).
  Events are global NEXMark events (all entities), read off the sources' offsets: a bid-only query
  consumes 200,000 events per 200,000-event batch even though only 184,000 of them are bids.
* Before measuring, every variant of every query runs once on a small stream (--check-events at
  --check-rate events/s, slow enough to span several windows) and (c)'s and (b)'s results are
  compared with (a)'s (`core.results.diff_results`): "checked" means they are equal, and the exit
  status is 1 otherwise. Those runs also warm the JVM up before the first measured run.
* The column "plan a vs b / c" compares `df.explain()` of the three streaming DataFrames up to
  expression ids: "same" means Spark runs literally the same physical plan, so any difference in
  their figures is noise, which calibrates how far the other ratios can be trusted.
* shuffle_partitions = 1: with one core, a second shuffle partition only runs a second task, and a
  second state store instance per stateful operator, one after the other: fixed per-task overhead
  added to every variant, which dilutes the differences between them without informing about them.
* rewrite_ms is the median `rewrite(plan).rewrite_ms` over 1000 calls (compile time, not in (a)).

Reading the figures: a/b is what the inactive proxies cost (1.00 = nothing; target >= 0.95); a/c is
ours against what a Spark expert would write (target >= 0.9; above 1 means our lowering beats the
straightforward hand-written plan). Both are ratios of the medians; "per round" gives the median,
lowest and highest of the ratios within one round, a hint at how much of a difference is noise.
Absolute events/s include the Python source (event generation in Spark's Python workers), which
costs the same in all variants. The default runs Q1, Q2, Q5 in about 4-7 minutes on 2 cores; every
query of QUERIES has a native baseline (--queries q0,...,q8), but the stateful ones take longer
(and Q7 at the default 10,000 events/s takes minutes per micro-batch in (a)/(b); try --rate 1000).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import re
import shutil
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.native_queries import NATIVE_QUERIES
from bench.throughput_variants import (
    VARIANT_NAMES,
    VARIANTS,
    Measurement,
    native_frame,
    run_native,
    run_variant,
)
from core.nexmark.generator import GeneratorConfig
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES
from core.nexmark.schedule import RateSchedule
from core.results import diff_results, read_results
from core.rewrite import rewrite
from core.run_output import Existing
from core.spark.runner import RunConfig, run_query
from core.spark.session import SparkConfig, spark_session
from core.spark.streams import nexmark_sources

METHOD = (
    "steady state: events / sum(triggerExecution) over the micro-batches with events, excluding the "
    "first micro-batch (warm-up) and the punctuation/window-closing tail batches; variants interleaved, "
    "one run each per round in rotating order, median over rounds; all variants write Parquet"
)
MIN_MEASURED_BATCHES = 4


# ---- check and explain -------------------------------------------------------------------------


def check_query(
    spark: Any,
    query: str,
    gen: GeneratorConfig,
    params: QueryParams,
    sc: SparkConfig,
    work: Path,
    batch_events: int,
) -> str:
    """Run (a), (b) and (c) on a small stream; return "checked" or the first difference found."""
    outs = {}
    for v in VARIANTS:
        cfg = RunConfig(
            query=query,
            generator=gen,
            output=work / f"check_{query}_{v}",
            existing=Existing.REPLACE,  # a run of its own from an earlier call
            params=params,
            max_events_per_batch=batch_events,
            spark=sc,
            plain=(v == "b"),
        )
        if v == "c":
            run_native(spark, cfg)
        else:
            run_query(cfg)
        outs[v] = read_results(cfg.output)
    try:
        if outs["a"].num_rows == 0:
            return "UNCHECKED: (a) produced no rows on the check stream"
        for v in ("c", "b"):
            problem = diff_results(outs[v], outs["a"])
            if problem is not None:
                return f"MISMATCH ({v} vs a): {problem}"
        return "checked"
    finally:
        for v in VARIANTS:
            shutil.rmtree(work / f"check_{query}_{v}", ignore_errors=True)


def physical_plans(spark: Any, config: RunConfig) -> dict[str, str]:
    """`df.explain()` of the three variants' streaming DataFrames, built as their runs build them."""
    from core.spark.lower import lower_plain, lower_rewritten

    make = nexmark_sources(spark, config, pace_origin=time.time())
    logical = QUERIES[config.query].plan(config.params)
    frames = {
        "a": next(iter(lower_rewritten(rewrite(logical), make).values())),
        "b": next(iter(lower_plain(logical, make).values())),
        "c": native_frame(spark, config, time.time())[0],
    }
    plans = {}
    for v, df in frames.items():
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            df.explain()
        plans[v] = buf.getvalue()
    return plans


_PLAN_NOISE = (
    (re.compile(r"#\d+L?"), "#"),  # expression ids
    (re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"), "<uuid>"),
    (re.compile(r"plan_id=\d+"), "plan_id"),
    (re.compile(r"\bx_\d+\b"), "x"),  # lambda variables
)


def normalized(plan: str) -> str:
    """A plan with the ids that differ between two builds of the same plan blanked out."""
    for pattern, repl in _PLAN_NOISE:
        plan = pattern.sub(repl, plan)
    return plan


def round_order(r: int, fixed: bool) -> tuple[str, ...]:
    """a,b,c in round 0, b,c,a in round 1, c,a,b in round 2, ...: no variant always runs first."""
    k = 0 if fixed else r % len(VARIANTS)
    return VARIANTS[k:] + VARIANTS[:k]


def rewrite_ms(query: str, params: QueryParams, calls: int = 1000) -> float:
    plan = QUERIES[query].plan(params)
    return statistics.median(rewrite(plan).rewrite_ms for _ in range(calls))


# ---- main --------------------------------------------------------------------------------------


def _ratio(x: float, y: float) -> float:
    return x / y if y > 0 else float("nan")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.throughput", description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=1_000_000, help="events per measured run (all entities)")
    ap.add_argument("--batch-events", type=int, default=200_000, help="max events per micro-batch")
    ap.add_argument("--queries", default="q1,q2,q5", help="comma-separated, from " + ",".join(NATIVE_QUERIES))
    ap.add_argument("--repeats", type=int, default=5, help="interleaved rounds a,b,c per query")
    ap.add_argument(
        "--fixed-order",
        action="store_true",
        help="run a,b,c in every round instead of rotating the order round by round",
    )
    ap.add_argument("--shuffle-partitions", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument(
        "--rate",
        type=float,
        default=10_000.0,
        help="events/s of event time of the measured stream (docs/queries.md default 10,000)",
    )
    ap.add_argument("--check-events", type=int, default=40_000, help="events of the (c)==(a) check run")
    ap.add_argument(
        "--check-rate",
        type=float,
        default=1_000.0,
        help="events/s of event time on the check stream (low, so it spans several windows)",
    )
    ap.add_argument("--json", type=Path, default=Path("runs/bench/throughput.json"))
    ap.add_argument("--work-dir", type=Path, default=Path("runs/bench/work"))
    ap.add_argument(
        "--explain",
        type=Path,
        default=None,
        help="also write df.explain() of (a), (b) and (c) per query to DIR/<query>_<variant>.txt",
    )
    args = ap.parse_args(argv)
    args.queries = [q.strip().lower() for q in args.queries.split(",") if q.strip()]
    unknown = [q for q in args.queries if q not in NATIVE_QUERIES]
    if unknown:
        ap.error(f"no native baseline for {', '.join(unknown)}; choose from {', '.join(NATIVE_QUERIES)}")
    if args.repeats < 1 or args.events <= 0 or args.batch_events <= 0:
        ap.error("--repeats, --events and --batch-events must be positive")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    from rich.console import Console
    from rich.table import Table

    args = parse_args(argv)
    console = Console(width=None if sys.stdout.isatty() else 150)
    params = QueryParams()
    sc = SparkConfig(master="local[1]", shuffle_partitions=args.shuffle_partitions, app_name="sponge-bench")
    spark = spark_session(sc)
    work: Path = args.work_dir
    work.mkdir(parents=True, exist_ok=True)
    bench_gen = GeneratorConfig(seed=args.seed, events=args.events, schedule=RateSchedule.constant(args.rate))
    check_gen = GeneratorConfig(
        seed=args.seed, events=args.check_events, schedule=RateSchedule.constant(args.check_rate)
    )
    check_batch = max(1, args.check_events // 5)
    started = time.time()
    results: dict[str, dict[str, Any]] = {}
    try:
        for q in args.queries:
            console.print(f"[bold]{q}[/bold]: rewrite time ...", end=" ")
            r_ms = rewrite_ms(q, params)
            console.print(f"{r_ms:.3f} ms; check on {args.check_events:,} events ...", end=" ")
            status = check_query(spark, q, check_gen, params, sc, work, check_batch)
            console.print(status)
            plans = physical_plans(
                spark,
                RunConfig(query=q, generator=bench_gen, output=work / "unused", params=params, spark=sc),
            )
            same = {o: normalized(plans["a"]) == normalized(plans[o]) for o in ("b", "c")}
            results[q] = {
                "rewrite_ms": r_ms,
                "check": status,
                "same_plan": same,
                "runs": {v: [] for v in VARIANTS},
            }
            if args.explain is not None:
                args.explain.mkdir(parents=True, exist_ok=True)
                for v, text in plans.items():
                    (args.explain / f"{q}_{v}.txt").write_text(text)
        for q in args.queries:
            for r in range(args.repeats):
                line = []
                for v in round_order(r, args.fixed_order):
                    cfg = RunConfig(
                        query=q,
                        generator=bench_gen,
                        output=work / f"{q}_{v}",
                        existing=Existing.REPLACE,  # the same variant's run of an earlier repeat
                        params=params,
                        max_events_per_batch=args.batch_events,
                        spark=sc,
                        plain=(v == "b"),
                    )
                    m = run_variant(spark, v, cfg)
                    results[q]["runs"][v].append(m)
                    line.append(f"{v}={m.events_per_s:,.0f}/s ({m.batches} batches)")
                    if m.batches < MIN_MEASURED_BATCHES:
                        console.print(
                            f"[yellow]warning: {q} {v} had only {m.batches} measured batches; "
                            "raise --events[/yellow]"
                        )
                console.print(f"{q} round {r + 1}/{args.repeats}: " + "  ".join(line))
    finally:
        spark.stop()
    elapsed = time.time() - started

    table = Table(
        title=f"events/s, Spark local[1], shuffle partitions {args.shuffle_partitions}, "
        f"{args.events:,} events, {args.batch_events:,}/batch, median of {args.repeats}"
    )
    left = ("query", "plan a vs b / c", "(c),(b) vs (a)")
    for name in (
        "query",
        "(a) ours",
        "(b) plain",
        "(c) native",
        "a/b",
        "a/c",
        "a/b per round",
        "a/c per round",
        "plan a vs b / c",
        "rewrite ms",
        "(c),(b) vs (a)",
    ):
        table.add_column(name, justify="left" if name in left else "right")
    report: dict[str, Any] = {
        "method": METHOD,
        "master": sc.master,
        "shuffle_partitions": sc.shuffle_partitions,
        "events": args.events,
        "rate": args.rate,
        "max_events_per_batch": args.batch_events,
        "repeats": args.repeats,
        "order": "a,b,c every round" if args.fixed_order else "rotating: a,b,c / b,c,a / c,a,b / ...",
        "check_events": args.check_events,
        "elapsed_s": round(elapsed, 1),
        "queries": {},
    }
    for q, res in results.items():
        runs: dict[str, list[Measurement]] = res["runs"]
        med = {v: statistics.median(m.events_per_s for m in runs[v]) for v in VARIANTS}
        paired = {
            f"a/{o}": [
                _ratio(a.events_per_s, x.events_per_s) for a, x in zip(runs["a"], runs[o], strict=True)
            ]
            for o in ("b", "c")
        }
        ab, ac = _ratio(med["a"], med["b"]), _ratio(med["a"], med["c"])

        def rounds(xs: list[float]) -> str:
            return f"{statistics.median(xs):.2f} [{min(xs):.2f}-{max(xs):.2f}]"

        plan_text = " / ".join("same" if res["same_plan"][o] else "differs" for o in ("b", "c"))
        table.add_row(
            q,
            f"{med['a']:,.0f}",
            f"{med['b']:,.0f}",
            f"{med['c']:,.0f}",
            f"{ab:.3f}",
            f"{ac:.3f}",
            rounds(paired["a/b"]),
            rounds(paired["a/c"]),
            plan_text,
            f"{res['rewrite_ms']:.3f}",
            res["check"].splitlines()[0],
        )
        report["queries"][q] = {
            "events_per_s": {v: round(med[v], 1) for v in VARIANTS},
            "a_over_b": round(ab, 4),
            "a_over_c": round(ac, 4),
            "paired_ratios": {k: [round(x, 4) for x in xs] for k, xs in paired.items()},
            "same_physical_plan": {f"a_vs_{o}": res["same_plan"][o] for o in ("b", "c")},
            "rewrite_ms": round(res["rewrite_ms"], 4),
            "check": res["check"],
            "runs": {
                v: [{**asdict(m), "events_per_s": round(m.events_per_s, 1)} for m in runs[v]]
                for v in VARIANTS
            },
        }
    console.print(table)
    console.print("variants: " + "; ".join(f"({v}) {n}" for v, n in VARIANT_NAMES.items()))
    console.print(f"method: {METHOD}")
    console.print(
        "a/b, a/c: ratios of the medians; per round: median \\[min-max] of the ratios within one "
        "round; plan: df.explain() of (a) equal to (b)'s / (c)'s up to expression ids"
    )
    console.print(f"rewrite ms: median of 1000 rewrite(plan) calls; total bench time {elapsed:.0f} s")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(report, indent=2) + "\n")
    console.print(f"figures written to {args.json}")
    shutil.rmtree(work, ignore_errors=True)
    failed = [q for q, res in results.items() if res["check"] != "checked"]
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

"""The `sponge` command line: compile, run, reference, events, queries, drill.

Errors a user can act on are printed as one line with what to do, never as a traceback; pass
--debug before the command to see the traceback of an unexpected failure.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from core.errors import ConfigError, SpongeError

app = typer.Typer(
    help="Sponge on Spark: keep Spark streaming jobs fast through bursts by offloading to Lambda workers.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
    rich_markup_mode=None,
)
out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_debug = {"on": False}

QueryArg = Annotated[str, typer.Argument(help="NEXMark query, q0..q8 (see `sponge queries`).")]
EventsOpt = Annotated[int, typer.Option("--events", "-n", min=0, help="Number of events (all entities).")]
SeedOpt = Annotated[int, typer.Option("--seed", "-s", min=0, help="Generator seed; same seed, same events.")]
RateOpt = Annotated[
    float | None,
    typer.Option(
        "--rate",
        min=0.001,
        help="Events per second of the generated schedule. Event times follow it, and `run` releases "
        "events at that pace. Without it, event times advance at 10,000/s and `run` reads as fast as it can.",
    ),
]
OutputOpt = Annotated[
    Path, typer.Option("--output", "-o", help="Directory for Parquet results + summary.json.")
]
WindowOpt = Annotated[int, typer.Option("--window-size", min=1, help="Window size in seconds.")]
SlideOpt = Annotated[
    int, typer.Option("--window-slide", min=1, help="Slide of sliding windows (Q5), seconds.")
]


OffloadShareOpt = Annotated[
    float | None,
    typer.Option(
        "--offload-share",
        min=0.0,
        max=1.0,
        help="Share of records (0..1) routed to Lambda workers for the whole run; 0 routes but keeps "
        "everything on the VMs. Without it the query runs with inactive routers.",
    ),
]
WorkersOpt = Annotated[int, typer.Option("--workers", min=1, help="Lambda workers the agent may run.")]
TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        help="Where workers run: embedded (worker processes on this machine running the Lambda handler).",
    ),
]
InvocationTypeOpt = Annotated[
    str,
    typer.Option(
        "--invocation-type",
        help="How the agent invokes a deployed function (--target localstack|aws): Event (Lambda queues "
        "what it cannot run yet) or RequestResponse (a reached concurrency limit is an immediate 429, "
        "counted as a throttle).",
    ),
]
InjectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--inject",
        help="Inject a fault, KIND:key=value[,key=value]; repeat for several. Kinds: "
        "kill-worker:every=2s (kill a busy worker every 2 s), throttle:share=0.2 (20% of invokes throttled), "
        "slow-worker:share=0.1,delay=30s (10% of chunks stall 30 s on their worker), "
        "agent-restart:at=10s (kill and restart the VM agent), task-failure:share=0.05 (5% of source "
        "tasks fail once), query-restart:at=15s (stop the query and resume it from its checkpoint). "
        "Needs --offload-share.",
    ),
]


def _offload(
    share: float | None, workers: int, target: str, inject: list[str], invocation_type: str = "Event"
):
    from core.fault_spec import parse_all
    from core.spark.offload_session import OffloadConfig

    faults = parse_all(inject)
    if share is None:
        if faults:
            raise ConfigError("--inject needs --offload-share", hint="add e.g. --offload-share 0.5")
        if invocation_type != "Event":
            raise ConfigError("--invocation-type needs --offload-share", hint="add e.g. --offload-share 0.5")
        return None
    return OffloadConfig(
        share=share, workers=workers, target=target, faults=faults, invocation_type=invocation_type
    )


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected failures.")] = False,
):
    _debug["on"] = debug


def _generator(events: int, seed: int, rate: float | None):
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.schedule import RateSchedule

    schedule = RateSchedule.constant(rate) if rate is not None else RateSchedule.constant(10_000)
    return GeneratorConfig(seed=seed, events=events, schedule=schedule)


def _params(window_size: int, window_slide: int):
    from core.nexmark.params import QueryParams

    return QueryParams(window_size_s=window_size, window_slide_s=min(window_slide, window_size))


@app.command()
def queries() -> None:
    """List the NEXMark queries, one line each."""
    from core.nexmark.queries import QUERIES

    for info in QUERIES.values():
        out.print(f"{info.name}  {info.summary}")


@app.command(name="compile")
def compile_(
    query: QueryArg,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the logical and rewritten DAGs as JSON.")
    ] = False,
) -> None:
    """Compile a query: its logical DAG and the DAG after operator insertion (TOs, ROs, MOs)."""
    from core.nexmark.queries import get_query
    from core.render import render_logical, render_rewritten
    from core.rewrite import rewrite

    info = get_query(query)
    logical = info.plan()
    rewritten = rewrite(logical)
    if as_json:
        doc = {
            "query": info.name,
            "logical": logical.to_json(),
            "rewritten": rewritten.to_json(),
            "rewrite_ms": round(rewritten.rewrite_ms, 3),
        }
        sys.stdout.write(json.dumps(doc) + "\n")
        return
    out.print(render_logical(logical))
    out.print(render_rewritten(rewritten))


@app.command()
def run(
    query: QueryArg,
    output: OutputOpt,
    events: EventsOpt = 100_000,
    seed: SeedOpt = 0,
    rate: RateOpt = None,
    window_size: WindowOpt = 10,
    window_slide: SlideOpt = 2,
    batch_events: Annotated[int, typer.Option(min=1, help="Most events per micro-batch (epoch).")] = 200_000,
    master: Annotated[
        str, typer.Option(help="Spark master URL for the VM side; local[N,F] runs a failed task F times.")
    ] = "local[2,4]",
    input_dir: Annotated[
        Path | None,
        typer.Option(
            "--input",
            "-i",
            file_okay=False,
            help="Read events from DIR/{person,auction,bid}/*.jsonl instead of generating them (--events "
            "and --seed are then unused, --rate is refused). Bad lines go to OUTPUT/dead_letter and are "
            "counted in summary.json.",
        ),
    ] = None,
    offload_share: OffloadShareOpt = None,
    workers: WorkersOpt = 2,
    target: TargetOpt = "embedded",
    invocation_type: InvocationTypeOpt = "Event",
    inject: InjectOpt = None,
) -> None:
    """Stream EVENTS generated NEXMark events (or the JSONL events of --input) through QUERY on Spark.

    With --offload-share F, a share F of the records is routed to Lambda workers (transient
    operators) through the VM agent, and their results are merged back into Spark's state.
    """
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig

    config = RunConfig(
        query=query,
        generator=_generator(events, seed, rate),
        output=output,
        params=_params(window_size, window_slide),
        pace=rate is not None,
        max_events_per_batch=batch_events,
        spark=SparkConfig(master=master),
        input=input_dir,
        offload=_offload(offload_share, workers, target, inject or [], invocation_type),
    )
    _check_query(query)
    what = f"the events of {input_dir}" if input_dir is not None else f"{events:,} events"
    with err.status(f"streaming {what} through {query} ...") as status:
        summary = run_query(
            config,
            progress=lambda p: status.update(
                f"{query}: epoch {p['batchId']}, {p['numInputRows']:,} records in the last epoch"
            ),
        )
    out.print(json.dumps(summary, indent=2))


@app.command()
def reference(
    query: QueryArg,
    output: OutputOpt,
    events: EventsOpt = 100_000,
    seed: SeedOpt = 0,
    rate: RateOpt = None,
    window_size: WindowOpt = 10,
    window_slide: SlideOpt = 2,
) -> None:
    """Compute QUERY's results in batch with DuckDB SQL, independently of the Spark lowering."""
    from core.nexmark.reference import write_reference

    _check_query(query)
    summary = write_reference(
        query, _generator(events, seed, rate), _params(window_size, window_slide), output
    )
    out.print(json.dumps(summary, indent=2))


@app.command()
def events(output: OutputOpt, events: EventsOpt = 100_000, seed: SeedOpt = 0, rate: RateOpt = None) -> None:
    """Write the generated events as Parquet, one directory per entity, with event and arrival times."""
    from core.nexmark.export import write_events

    counts = write_events(_generator(events, seed, rate), output)
    out.print(json.dumps({"output": str(output), "rows": counts}, indent=2))



@app.command()
def drill(
    query: Annotated[str, typer.Option("--query", "-q", help="NEXMark query.")] = "q5",
    pattern: Annotated[
        str, typer.Option(help="Burst KIND:FACTORx:SECONDSs: sudden:2x:30s, sine:2x:20s, gradual:3x:40s.")
    ] = "sudden:2x:30s",
    duration: Annotated[float, typer.Option(min=10, help="Seconds of trace per policy.")] = 90.0,
    lead: Annotated[float, typer.Option(min=5, help="Stable seconds before the burst.")] = 30.0,
    compare: Annotated[
        str,
        typer.Option(
            help="Policies run one after another on one trace: sponge, noscaling, vmbase, vminit, over "
            "(sfbase: `sponge simulate`)."
        ),
    ] = "sponge,noscaling,over",
    policy: Annotated[str | None, typer.Option(help="Run one policy (instead of --compare).")] = None,
    rate: Annotated[
        float | None,
        typer.Option(
            min=1,
            help="Stable events/s, skipping the probes (default: probed so that the VM's epochs spend "
            "~70 % of their time on records).",
        ),
    ] = None,
    target: Annotated[
        str, typer.Option(help="Where Lambda workers run: embedded, or localstack|aws after sponge deploy.")
    ] = "embedded",
    report: Annotated[Path, typer.Option(help="Directory for report.json, report.md and the plots.")] = Path(
        "runs/drill"
    ),
    workers: Annotated[int, typer.Option(min=1, help="Most Lambda workers the policy may use.")] = 4,
    vm_launch_delay: Annotated[
        float,
        typer.Option(
            min=0,
            max=600,
            help="vmbase: seconds a new VM boots before its Spark worker starts (the paper's 25 s); its "
            "executor is usable some seconds later. vminit's VM is started before the trace.",
        ),
    ] = 25.0,
    seed: SeedOpt = 0,
) -> None:
    """Burst drill: run QUERY through a burst under several scaling policies and compare them.

    Each policy runs in its own process on the same trace, the VM side pinned to core 0 and the
    Lambda workers to core 1 (Over gets both cores for the VMs). vmbase and vminit run on a Spark
    standalone cluster and, when the policy detects the burst, add a VM (a worker on core 1): vmbase's
    after --vm-launch-delay, vminit's was started in advance. The drill prints a table, checks
    every policy's output against the batch reference, and writes report.json, report.md and PNG plots
    (p99 latency per second with the burst shaded, VM CPU, workers, offloaded share) under --report.
    """
    from core.drill.drill import DrillConfig, policies_from, run_drill
    from core.drill.report import write_report

    _check_query(query)
    config = DrillConfig(
        query=query,
        pattern=pattern,
        duration_s=duration,
        lead_s=lead,
        policies=policies_from(policy or compare),
        target=target,
        report=report,
        seed=seed,
        stable_rate=rate,
        max_workers=workers,
        vm_launch_delay_s=vm_launch_delay,
    )
    with err.status("drill ...") as spinner:
        result = run_drill(config, status=lambda text: spinner.update(f"drill: {text}"))
    paths = write_report(result, report, console=out)
    out.print(f"report: {paths['markdown']}")
    failed = [r["policy"] for r in result["runs"] if r["results_match_reference"] is False]
    if failed:
        err.print(f"error: output differs from the batch reference for {', '.join(failed)}")
        raise typer.Exit(1)


import core.cli_deploy  # noqa: E402, F401 - registers deploy, destroy and status on app

__import__("core.cli_simulate", fromlist=["register"]).register(app)  # registers simulate on app


def _check_query(name: str) -> None:
    from core.nexmark.queries import get_query

    get_query(name)


def main() -> None:
    try:
        rc = app(standalone_mode=False, prog_name="sponge")
        sys.exit(rc if isinstance(rc, int) else 0)
    except SpongeError as e:
        err.print(f"error: {e.one_line()}", markup=False)
        sys.exit(2)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except typer.TyperException as e:
        ctx = getattr(e, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "sponge"
        err.print(f"error: {e.format_message()} (see `{cmd} --help`)", markup=False)
        sys.exit(2)
    except Exception as e:
        if _debug["on"]:
            raise
        err.print(
            f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
            "(rerun with `sponge --debug ...` for the traceback)",
            markup=False,
        )
        sys.exit(1)


__all__ = ["ConfigError", "app", "main"]

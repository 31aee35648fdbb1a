"""The options several commands share, and the configuration values they turn into."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from core.errors import ConfigError

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
    Path,
    typer.Option("--output", "-o", file_okay=False, help="Directory for Parquet results + summary.json."),
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
        "Instead of a time, a fault can wait for an event, which fires at the same point on any machine: "
        "agent-restart:after-epoch=3 and query-restart:after-epoch=3 (once epoch 3 has committed), "
        "kill-worker:after-chunks=10 (once, after the 10th chunk went out). Needs --offload-share.",
    ),
]


def generator(events: int, seed: int, rate: float | None):
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.schedule import RateSchedule

    schedule = RateSchedule.constant(rate) if rate is not None else RateSchedule.constant(10_000)
    return GeneratorConfig(seed=seed, events=events, schedule=schedule)


def params(window_size: int, window_slide: int):
    from core.nexmark.params import QueryParams

    return QueryParams(window_size_s=window_size, window_slide_s=min(window_slide, window_size))


def check_query(name: str) -> None:
    from core.nexmark.queries import get_query

    get_query(name)


_MASTER = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]|yarn|(spark|k8s|mesos)://\S+")


def check_master(master: str) -> None:
    """Refuse a malformed Spark master URL before anything starts: Spark itself only notices it after
    the JVM is up, seconds later and with a Java stack trace."""
    if not _MASTER.fullmatch(master.strip()):
        raise ConfigError(
            f"--master {master!r} is not a Spark master URL",
            hint="use local[N], local[N,F] (a failed task runs F times), local-cluster[N,C,MB] "
            "or spark://HOST:PORT",
        )


def offload_config(
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

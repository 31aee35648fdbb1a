"""`sponge produce`: write NEXMark events into a Kinesis stream, at their schedule's pace."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from core.cli.options import EventsOpt, SeedOpt, generator
from core.console import out, progress

StreamOpt = Annotated[str, typer.Option("--stream", help="The Kinesis stream's name.")]
EndpointOpt = Annotated[
    str | None,
    typer.Option(
        "--endpoint-url",
        help="Kinesis endpoint, e.g. LocalStack's http://127.0.0.1:4566 (make localstack); without it, "
        "AWS's, with boto3's credentials.",
    ),
]
RegionOpt = Annotated[str, typer.Option("--region", help="The stream's AWS region.")]


def produce(
    stream: StreamOpt,
    endpoint_url: EndpointOpt = None,
    region: RegionOpt = "us-east-1",
    events: EventsOpt = 100_000,
    seed: SeedOpt = 0,
    rate: Annotated[
        float | None,
        typer.Option(
            "--rate",
            min=0.001,
            help="Events per second: event times follow it, and events are put at that pace.",
        ),
    ] = None,
    schedule: Annotated[
        str | None,
        typer.Option(
            "--schedule",
            help='A drill\'s pattern instead of --rate: "seconds:rate" segments, e.g. '
            '"30:10000,10:50000,30:10000" (a burst); events are put at its pace.',
        ),
    ] = None,
    shards: Annotated[int, typer.Option(min=1, help="Shards of the stream, if it must be created.")] = 2,
    end: Annotated[
        bool,
        typer.Option(
            "--end/--no-end",
            help="Put the end-of-stream marker into every shard after the last event, so a run over the "
            "stream ends there (--no-end: more may follow).",
        ),
    ] = True,
) -> None:
    """Put EVENTS generated NEXMark events into --stream (created with --shards if missing), paced.

    The events are those `sponge run` generates for the same --events, --seed and --rate (or
    --schedule), so `sponge run Q --source kinesis --stream NAME ...` can be checked against the
    batch reference. Without --rate or --schedule they are put as fast as Kinesis takes them.
    """
    from core.errors import ConfigError
    from core.kinesis import KinesisEndpoint
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.schedule import RateSchedule
    from core.produce import ProduceConfig
    from core.produce import produce as put

    if rate is not None and schedule is not None:
        raise ConfigError("--rate and --schedule both set the pace", hint="pass one of them")
    gen = generator(events, seed, rate)
    if schedule is not None:
        gen = GeneratorConfig(seed=seed, events=events, schedule=RateSchedule.parse(schedule))
    config = ProduceConfig(
        gen,
        KinesisEndpoint(stream, endpoint_url, region),
        shards=shards,
        pace=rate is not None or schedule is not None,
        end=end,
    )
    with progress(f"putting {events:,} events into {stream} ...") as shown:
        summary = put(config, lambda done, total: shown(f"{stream}: {done:,}/{total:,} events put"))
    out.print(json.dumps(summary, indent=2))


def register(app: typer.Typer) -> None:
    """Add `sponge produce` to the app."""
    app.command()(produce)

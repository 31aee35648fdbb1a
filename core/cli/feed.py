"""`sponge feed`: a trial's input for a job file, written at a rate, with a burst if asked."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from core.cli.options import JobArg
from core.console import out, progress
from core.errors import ConfigError


def feed(
    job_ref: JobArg,
    output: Annotated[
        Path,
        typer.Option(
            "--output", "-o", file_okay=False, help="The input directory to write: OUTPUT/<source>/part-*."
        ),
    ],
    records: Annotated[int, typer.Option(help="Records per source.")] = 100_000,
    rate: Annotated[float, typer.Option(help="Records per second of event time, per source.")] = 1_000.0,
    files: Annotated[int, typer.Option(help="Files per source (written in order, each whole).")] = 20,
    keys: Annotated[
        int, typer.Option(help="Distinct values of every int64 and string column (join keys, groups).")
    ] = 1_000,
    seed: Annotated[int, typer.Option(help="Seed of the values.")] = 0,
    burst_at: Annotated[
        float,
        typer.Option(
            help="Second the burst starts: the next 30 s of records come --burst-factor times as fast."
        ),
    ] = -1.0,
    burst_factor: Annotated[float, typer.Option(help="How much faster the burst's records come.")] = 10.0,
    live: Annotated[
        bool,
        typer.Option(
            "--live",
            help="Write each file when its last record is due, for a run following OUTPUT (--policy).",
        ),
    ] = False,
) -> None:
    """Write a trial's input for JOB (FILE.py:NAME): each of its sources fed at --rate records per second.

    Every int64 column draws from the same --keys values and strings are those keys as text, so joins
    find partners and keyed aggregates have --keys groups; the event time advances at the rate. With
    --live the files arrive as their records happen: start `sponge run JOB --input OUTPUT --policy
    sponge` first, and the burst reaches it as one.
    """
    from core.job import is_file_ref, load
    from core.trial_feed import FeedConfig
    from core.trial_feed import feed as write

    if not is_file_ref(job_ref):
        raise ConfigError(
            f"{job_ref} is a NEXMark query, whose own generator feeds it",
            hint=f"run `sponge run {job_ref} --rate R` (no --input), or pass a job file FILE.py:NAME",
        )
    config = FeedConfig(records, rate, files, keys, seed, burst_at, burst_factor, live)
    sources = load(job_ref).sources
    taken = [p for name in sources for p in sorted((output / name).glob("part-*"))[:1]]
    if taken:
        raise ConfigError(
            f"{taken[0]} already exists: feeding {output} would replace files a run may have read",
            hint="pass a new or empty --output",
        )
    with progress(f"feeding {', '.join(sources)} under {output} ...") as shown:
        counts = write(output, sources, config, lambda done, total: shown(f"{done}/{total} files"))
    out.print(json.dumps({"output": str(output), "records": counts}, indent=2))


def register(app: typer.Typer) -> None:
    """Add `sponge feed` to the app."""
    app.command()(feed)

"""`sponge chaos`: random fault schedules on Spark, every output checked against the reference."""

from __future__ import annotations

import json
import shutil
import signal
import sys
import tempfile
from pathlib import Path
from typing import Annotated

import typer

from core.cli.options import EventsOpt, QueryArg, check_query, generator, params
from core.console import err, out
from core.errors import ConfigError


def chaos(
    query: QueryArg,
    schedules: Annotated[int, typer.Option(min=1, help="How many schedules to run.")] = 3,
    seed: Annotated[int, typer.Option(min=0, help="Schedule i draws its faults from seed+i.")] = 1,
    events: EventsOpt = 8_000,
    batch_events: Annotated[int, typer.Option(min=1, help="Most events per micro-batch (epoch).")] = 1_000,
    offload_share: Annotated[float, typer.Option(min=0.0, max=1.0, help="Share routed to workers.")] = 0.5,
    workers: Annotated[int, typer.Option(min=1, help="Lambda workers the agent may run.")] = 2,
    workdir: Annotated[
        Path | None,
        typer.Option(
            file_okay=False,
            help="Where the runs go (default: a new temporary directory); a failing one stays.",
        ),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="End with the figures as one JSON line.")] = False,
) -> None:
    """Run QUERY offloaded under random fault schedules and check every output record by record.

    Each schedule is a `sponge run` process of its own with one to three faults drawn from its seed
    among every kind `--inject` knows (worker kill, throttle, stalled worker, agent restart and
    SIGKILL, task failure, query restart, driver kill), each fired by an event. A killed driver is
    resumed from its checkpoint with --resume. The output is compared with the DuckDB reference: lost,
    duplicated and unexpected records are counted, and a failing schedule is printed with the command
    that replays it. Exit status 1 when any schedule failed.
    """
    from core.chaos_tally import Tally
    from core.drill.chaos import ChaosRun, run_schedule, schedule
    from core.nexmark.reference import write_reference
    from core.results import read_results

    check_query(query)
    # A SIGTERM stops the schedule's `sponge run` too (subprocess.run kills its child on an exception).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    run = ChaosRun(query, events, batch_events, offload_share, workers)
    work = workdir or Path(tempfile.mkdtemp(prefix="sponge-chaos-"))
    work.mkdir(parents=True, exist_ok=True)
    err.print(f"runs go to {work}", highlight=False)
    write_reference(query, generator(events, 1, None), params(10, 2), work / "reference")
    reference = read_results(work / "reference")
    if reference.num_rows == 0:
        raise ConfigError(
            f"{query}'s reference over {events} events is empty: no schedule could lose a record",
            hint="raise --events",
        )
    tally = Tally(replay=run.replay())
    for i in range(schedules):
        faults = " ".join(f.text() for f in schedule(run, seed + i))
        err.print(f"schedule {i + 1}/{schedules} (seed {seed + i}): {faults}", highlight=False)
        outcome = run_schedule(run, seed + i, reference, work, lambda line: err.print(line, highlight=False))
        tally.add(outcome)
        verdict = "ok" if outcome.ok else (
            f"FAILED: lost {outcome.lost}, duplicated {outcome.duplicated}, unexpected {outcome.unexpected}"
            f"{'; ' + outcome.error if outcome.error else ''}; output kept in {work / f'seed-{seed + i}'}; "
            f"replay: {tally.replay_command(outcome.seed)}"
        )  # fmt: skip
        err.print(f"  {verdict} ({outcome.seconds:.0f} s)", highlight=False)
    report = {"query": query, "events": events, "seed": seed, **tally.report()}
    out.print(
        f"{query}: {report['schedules']} schedules, {report['failed']} failed; lost {report['lost']}, "
        f"duplicated {report['duplicated']}, unexpected {report['unexpected']}; "
        f"fault mix {report['fault_mix']}",
        highlight=False,
    )
    if as_json:
        print(json.dumps(report), flush=True)
    if tally.failed:
        raise typer.Exit(1)
    if workdir is None:  # a temporary directory of our own, with nothing left to look at
        shutil.rmtree(work, ignore_errors=True)


def register(app: typer.Typer) -> None:
    """Add `sponge chaos` to the app."""
    app.command()(chaos)

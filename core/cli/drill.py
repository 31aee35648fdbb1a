"""`sponge drill`: a burst drill of one query under several scaling policies, checked and reported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.cli.options import SeedOpt, check_query
from core.console import err, out


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
    report: Annotated[
        Path, typer.Option(file_okay=False, help="Directory for report.json, report.md and the plots.")
    ] = Path("runs/drill"),
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

    check_query(query)
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


def register(app: typer.Typer) -> None:
    """Add `sponge drill` to the app."""
    app.command()(drill)

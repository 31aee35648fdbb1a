"""`sponge drill`: a burst drill of one query under several scaling policies, checked and reported."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from core.cli.options import (
    AdvertiseOpt,
    BindOpt,
    ConfigOpt,
    DriverMemoryOpt,
    ExecutorMemoryOpt,
    KeepWarmOpt,
    RocksdbMemoryOpt,
    SeedOpt,
    StateStoreOpt,
    TransportOpt,
    check_query,
    memory_config,
)
from core.cli.produce import EndpointOpt, RegionOpt
from core.console import err, out, progress
from core.errors import ConfigError

DEFAULT_COMPARE = "sponge,noscaling,over"
DEFAULT_WORKERS = 4
DEFAULT_VM_LAUNCH_DELAY_S = 25.0
STREAM_PREFIX = "sponge-drill"


def drill(
    query: Annotated[str, typer.Option("--query", "-q", help="NEXMark query.")] = "q5",
    pattern: Annotated[
        str,
        typer.Option(
            help="Burst KIND:FACTORx:SECONDSs: sudden:2x:30s, sine:2x:20s, gradual:3x:40s, or "
            "persistent:2x:150s, a burst long enough that sponge buys a VM and hands it the load "
            "(with --duration 200 or so).",
        ),
    ] = "sudden:2x:30s",
    duration: Annotated[float, typer.Option(min=10, help="Seconds of trace per policy.")] = 90.0,
    lead: Annotated[
        float,
        typer.Option(
            min=5,
            help="Seconds before the burst: the first 5 (at most half) ramp up to the stable rate, so each "
            "run's query starts level, and the rest hold it.",
        ),
    ] = 30.0,
    compare: Annotated[
        str | None,
        typer.Option(
            help="Policies run one after another on one trace: sponge, noscaling, vmbase, vminit, over, "
            "and the paper's baselines without Sponge's merge operators, live on Q5: sfbase (no "
            "operator inserted; every query in `sponge simulate`), sponge-ro (routers only), sponge-to "
            f"(routers and transient operators). Default: {DEFAULT_COMPARE}."
        ),
    ] = None,
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
    bind: BindOpt = None,
    advertise: AdvertiseOpt = None,
    transport: TransportOpt = None,
    config: ConfigOpt = None,
    report: Annotated[
        Path, typer.Option(file_okay=False, help="Directory for report.json, report.md and the plots.")
    ] = Path("runs/drill"),
    workers: Annotated[
        int | None,
        typer.Option(min=1, help=f"Most Lambda workers the sponge policy uses (default {DEFAULT_WORKERS})."),
    ] = None,
    vm_launch_delay: Annotated[
        float | None,
        typer.Option(
            min=0,
            max=600,
            help="vmbase, and sponge when a burst persists: seconds a new VM boots before its Spark "
            f"worker starts (default: the paper's {DEFAULT_VM_LAUNCH_DELAY_S:g} s); its executor is "
            "usable some seconds later. vminit's VM is started before the trace.",
        ),
    ] = None,
    keep_warm: KeepWarmOpt = None,
    seed: SeedOpt = 0,
    driver_memory: DriverMemoryOpt = None,
    executor_memory: ExecutorMemoryOpt = None,
    state_store: StateStoreOpt = None,
    rocksdb_memory: RocksdbMemoryOpt = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            metavar="generator|kinesis",
            help="Where each run's events come from: generator (the source paces them itself), or "
            "kinesis: a producer process puts them into a stream of the run's own at the trace's pace "
            "(`sponge produce`), and the run reads the stream. Kinesis needs --rate: the stream's pace "
            "is the producer's, e.g. --rate 300 on LocalStack.",
        ),
    ] = "generator",
    endpoint_url: EndpointOpt = None,
    region: RegionOpt = "us-east-1",
    stream: Annotated[
        str | None,
        typer.Option(
            "--stream",
            help=f"With --source kinesis: the name prefix of the runs' streams (default {STREAM_PREFIX}).",
        ),
    ] = None,
) -> None:
    """Burst drill: run QUERY through a burst under several scaling policies and compare them.

    Each policy runs in its own process on the same trace and the same deployment: a Spark standalone
    cluster whose VM is pinned to core 0, with the Lambda workers on core 1 (Over's VM gets both
    cores). vmbase and vminit add a VM (a worker on core 1) when the policy detects the burst:
    vmbase's after --vm-launch-delay, vminit's was started in advance. Sponge buys that VM only when
    a burst lasts so long that renting its Lambdas would cost more (a persistent:... pattern), then
    moves the load onto it and releases its workers; the report shows that hand-over and what staying
    on workers would have cost. Each run warms up, and its
    policy decides nothing until its epochs are steady; the report gives every policy's p99 before
    the burst and calls the drill unfair when they differ by more than 25 %. The drill prints a table,
    checks every policy's output against the batch reference, and writes report.json, report.md and
    PNG plots (p99 latency per second with the burst shaded, VM CPU, workers, offloaded share) under
    --report.

    Every run (the probes too) gets the same memory: --driver-memory, --executor-memory (each VM),
    --state-store and --rocksdb-memory, sized from this machine unless set. report.json records them;
    each run's JVM log is REPORT/<policy>/jvm.log.
    """
    from core.config_file import data_plane, policy_settings
    from core.drill.drill import EXECUTORS, DrillConfig, policies_from, run_drill
    from core.drill.report import write_report
    from router.agent.warm_pool import WarmPoolConfig

    check_query(query)
    if policy is not None and compare is not None:
        raise ConfigError("--policy and --compare both name the policies to run", hint="pass one of them")
    policies = policies_from(
        policy if policy is not None else compare if compare is not None else DEFAULT_COMPARE
    )
    unused = [
        (flag, needs)
        for flag, given, needs in (
            ("--workers", workers is not None, ("sponge",)),
            ("--keep-warm", keep_warm is not None, ("sponge",)),
            ("--vm-launch-delay", vm_launch_delay is not None, ("vmbase",)),
            ("--bind", bind is not None, ("sponge",)),
            ("--advertise", advertise is not None, ("sponge",)),
            ("--transport", transport is not None, ("sponge",)),
        )
        if given and not set(needs) & set(policies)
    ]
    if unused:
        flag, needs = unused[0]
        raise ConfigError(
            f"{flag} tunes the {' or '.join(needs)} policy, which this drill does not run",
            hint=f"drop {flag}, or add {needs[0]} to --compare",
        )
    from core.cli.run import kinesis_endpoint

    named = (stream or STREAM_PREFIX) if source == "kinesis" else stream
    kinesis = kinesis_endpoint(source, named, endpoint_url, region, None, None)
    config = DrillConfig(
        query=query,
        pattern=pattern,
        duration_s=duration,
        lead_s=lead,
        policies=policies,
        target=target,
        **data_plane(config, bind, advertise, transport).options(),
        report=report,
        seed=seed,
        stable_rate=rate,
        max_workers=DEFAULT_WORKERS if workers is None else workers,
        rho=policy_settings(config).rho,
        **({} if keep_warm is None else {"keep_warm_s": WarmPoolConfig(keep_warm_s=keep_warm).keep_warm_s}),
        vm_launch_delay_s=DEFAULT_VM_LAUNCH_DELAY_S if vm_launch_delay is None else vm_launch_delay,
        kinesis=kinesis,
        memory=memory_config(
            driver_memory,
            executor_memory,
            state_store,
            rocksdb_memory,
            executors=EXECUTORS,
            no_executors="",
        ),
    )
    with progress(f"drill ({config.memory.describe()}) ...") as shown:
        result = run_drill(config, status=lambda text: shown(f"drill: {text}"))
    paths = write_report(result, report, console=out)
    out.print(f"report: {paths['markdown']}")
    failed = [r["policy"] for r in result["runs"] if r["results_match_reference"] is False]
    if failed:
        err.print(f"error: output differs from the batch reference for {', '.join(failed)}")
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    """Add `sponge drill` to the app."""
    app.command()(drill)

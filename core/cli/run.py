"""`sponge run`: stream a query through Spark, optionally offloading a share to Lambda workers."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from core.cli.options import (
    AdvertiseOpt,
    BindOpt,
    ChunkTimeoutOpt,
    ConfigOpt,
    DriverMemoryOpt,
    EventsOpt,
    ExecutorMemoryOpt,
    HandoffOpt,
    InjectOpt,
    InvocationTypeOpt,
    JobArg,
    KeepWarmOpt,
    OffloadShareOpt,
    OutputOpt,
    RateOpt,
    RocksdbMemoryOpt,
    RoundKeysOpt,
    SeedOpt,
    SlideOpt,
    StateStoreOpt,
    SubscalesOpt,
    TargetOpt,
    TransportOpt,
    WindowOpt,
    WorkerNetnsOpt,
    WorkersOpt,
    check_master,
    generator,
    memory_config,
    offload_config,
    params,
)
from core.cli.produce import EndpointOpt, RegionOpt
from core.console import err, out, progress
from core.errors import ConfigError

if TYPE_CHECKING:
    from core.kinesis import KinesisEndpoint
    from core.spark.live_policy import LivePolicy
    from core.spark.runner import RunConfig


DEFAULT_PER_CORE_RATE = 40_000.0  # events/s per VM core: NEXMark's lighter queries on one core here
DEFAULT_RHO = 5.0  # a worker core against a VM core, when bench.offload has not measured the query


def run(
    query: JobArg,
    output: OutputOpt,
    events: EventsOpt = 100_000,
    seed: SeedOpt = 0,
    rate: RateOpt = None,
    window_size: WindowOpt = 10,
    window_slide: SlideOpt = 2,
    batch_events: Annotated[int, typer.Option(min=1, help="Most events per micro-batch (epoch).")] = 200_000,
    batch_files: Annotated[
        int, typer.Option(min=1, help="With --input: the most files of each source per micro-batch (epoch).")
    ] = 64,
    follow: Annotated[
        bool | None,
        typer.Option(
            "--follow/--no-follow",
            help="With --input: keep reading the files that arrive, until Ctrl-C or SIGTERM, which stop the "
            "run once the epoch in flight has committed; `--resume` continues it. --no-follow reads the "
            "files there are and closes the last windows. Default: follow with --policy (a policy watches "
            "a run that goes on), else not.",
        ),
    ] = None,
    master: Annotated[
        str, typer.Option(help="Spark master URL for the VM side; local[N,F] runs a failed task F times.")
    ] = "local[2,4]",
    input_dir: Annotated[
        Path | None,
        typer.Option(
            "--input",
            "-i",
            exists=True,
            file_okay=False,
            help="Read records from DIR/<source>/*.jsonl (*.parquet for a Parquet source) instead of "
            "generating them: DIR/{person,auction,bid} for a query, one directory per source for your own "
            "job (--events and --seed are then unused, --rate is refused). Bad lines or rows go to "
            "OUTPUT/dead_letter and are counted in summary.json.",
        ),
    ] = None,
    offload_share: OffloadShareOpt = None,
    workers: WorkersOpt = None,
    target: TargetOpt = "embedded",
    invocation_type: InvocationTypeOpt = "Event",
    handoff: HandoffOpt = "lazy",
    subscales: SubscalesOpt = 1,
    round_keys: RoundKeysOpt = None,
    transport: TransportOpt = None,
    bind: BindOpt = None,
    advertise: AdvertiseOpt = None,
    config: ConfigOpt = None,
    worker_netns: WorkerNetnsOpt = None,
    chunk_timeout: ChunkTimeoutOpt = None,
    keep_warm: KeepWarmOpt = None,
    inject: InjectOpt = None,
    driver_memory: DriverMemoryOpt = None,
    executor_memory: ExecutorMemoryOpt = None,
    state_store: StateStoreOpt = None,
    rocksdb_memory: RocksdbMemoryOpt = None,
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            metavar="none|noscaling|sponge",
            help="Who decides the offloaded share while the job runs. none (default): nobody; the run "
            "offloads the fixed --offload-share, or nothing. sponge: the paper's policy loop watches the "
            "VM's CPU, input rate and backlog once a second and, when a burst outruns the VMs, routes a "
            "share to Lambda workers (up to --workers) through the agent, from share 0, and gives it back "
            "once the backlog has drained; each decision with its inputs goes to "
            "OUTPUT/_policy/decisions.jsonl. noscaling: watches and records the same, never offloads (a "
            "baseline). Both write live figures to OUTPUT/_status/ (latest.json, metrics.prom for a "
            "Prometheus textfile collector, history.jsonl); `sponge status --run OUTPUT --watch` shows "
            "them. Needs --rate or --input: a backlog exists only where input arrives over time.",
        ),
    ] = "none",
    per_core_rate: Annotated[
        float | None,
        typer.Option(
            "--per-core-rate",
            min=1.0,
            help="With --policy sponge: events/s one VM core carries at full CPU, where the policy starts "
            "(it learns the real figure from the seconds the VMs run in their 60-80% CPU band without a "
            "queue). Too low offloads early, too high waits for the backlog's queue delay to fire. "
            f"Default: [policy] per_core_rate of sponge.toml, else {DEFAULT_PER_CORE_RATE:,.0f}.",
        ),
    ] = None,
    rho: Annotated[
        float | None,
        typer.Option(
            "--rho",
            min=0.01,
            help="With --policy sponge: a Lambda worker core's capacity in VM cores (sizes the workers "
            "of a share; bench.offload measures it per query). Default: [policy] rho of sponge.toml, "
            f"else {DEFAULT_RHO:g}.",
        ),
    ] = None,
    source: Annotated[
        str,
        typer.Option(
            "--source",
            metavar="generator|kinesis",
            help="Where records come from: generator (default: NEXMark's generator, or the files of "
            "--input), or kinesis: the records of --stream (written by `sponge produce`), to its "
            "end-of-stream markers; bad records go to OUTPUT/dead_letter. --offload-share or --policy "
            "sponge offloads them as for the other sources.",
        ),
    ] = "generator",
    stream: Annotated[str | None, typer.Option("--stream", help="With --source kinesis: the stream.")] = None,
    endpoint_url: EndpointOpt = None,
    region: RegionOpt = "us-east-1",
    resume: Annotated[
        bool,
        typer.Option(
            "--resume",
            help="Continue the stopped or crashed run in --output from its checkpoint: pass the flags it "
            "was started with (a different query, events, seed, windows or input is refused); --inject "
            "and the offload flags apply from here on.",
        ),
    ] = False,
) -> None:
    """Stream EVENTS generated NEXMark events (or the records of --input) through JOB on Spark.

    JOB is a NEXMark query or your own job file (FILE.py:NAME), which reads DIR/<source>/*.jsonl (or
    *.parquet) of --input for each of its sources; --events, --seed and the window options are the queries'.

    With --offload-share F, a share F of the records is routed to Lambda workers (transient
    operators) through the VM agent, and their results are merged back into Spark's state. With
    --policy sponge the share follows the load instead: 0 until a burst, as much as it needs then.

    Results and the checkpoint go to --output; a crashed or stopped run continues there with --resume.

    Memory (--driver-memory, --executor-memory, --state-store, --rocksdb-memory) is sized from this
    machine unless set; summary.json records it, and the JVM's log goes to OUTPUT/_logs/jvm.log.
    """
    from core.job import is_file_ref, load
    from core.run_output import Existing
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig, executor_jvms, worker_memory_mb

    check_master(master)
    kinesis = kinesis_endpoint(source, stream, endpoint_url, region, input_dir, rate)
    check_policy(policy, offload_share, per_core_rate, rho, rate=rate, input_dir=input_dir, kinesis=kinesis)
    settings_file = config  # `config` becomes the run's configuration below
    memory = memory_config(
        driver_memory,
        executor_memory,
        state_store,
        rocksdb_memory,
        executors=executor_jvms(master),
        no_executors=f"--master {master} runs every task in the driver JVM",
        executor_cap_mb=worker_memory_mb(master),
    )
    config = RunConfig(
        query=query,
        generator=generator(events, seed, rate),
        output=output,
        params=params(window_size, window_slide),
        pace=rate is not None,
        max_events_per_batch=batch_events,
        max_files_per_batch=batch_files,
        follow=follows(follow, policy, input_dir),
        spark=SparkConfig(master=master, memory=memory, jvm_log=output / "_logs" / "jvm.log"),
        input=input_dir,
        offload=offload_config(
            0.0 if policy == "sponge" else offload_share,  # the policy publishes the share from 0
            workers,
            target,
            inject or [],
            invocation_type,
            handoff=handoff,
            subscales=subscales,
            round_keys=round_keys,
            transport=transport,
            bind=bind,
            advertise=advertise,
            settings=config,
            worker_netns=worker_netns,
            chunk_timeout_s=chunk_timeout,
            keep_warm_s=keep_warm,
        ),
        existing=Existing.RESUME if resume else Existing.REFUSE,
        kinesis=kinesis,
    )
    job = load(query, config.params)  # a wrong job fails here, on its line, before Spark starts
    if kinesis is not None and is_file_ref(query) and len(job.sources) > 1:
        raise ConfigError(
            f"{query} reads {len(job.sources)} sources, and a run reads one Kinesis stream",
            hint="give the job one source, or read its sources' files with --input",
        )
    hooks = None
    if policy != "none":
        hooks = live_policy(policy, config, per_core_rate, rho, resume=resume, settings=settings_file)
    what = f"the events of {input_dir}" if input_dir is not None else f"{events:,} events"
    if kinesis is not None:
        what = f"the records of Kinesis stream {kinesis.stream}"
    stop = threading.Event()
    with (
        stopping_on_signals(stop),
        progress(f"streaming {what} through {query} ({memory.describe()}) ...") as shown,
    ):

        def on_epoch(p: dict) -> None:
            if hooks is not None:
                hooks.progress(p)
            shown(
                f"{query}: epoch {p['batchId']}, {p['numInputRows']:,} records in the last epoch"
                + (f", offload share {hooks.plan[0]:.0%}" if hooks is not None else "")
                + (" (stopping once it commits)" if stop.is_set() else "")
            )

        summary = run_query(config, progress=on_epoch, hooks=hooks, stop=stop)
    out.print(json.dumps(summary, indent=2))


def kinesis_endpoint(
    source: str,
    stream: str | None,
    endpoint_url: str | None,
    region: str,
    input_dir: Path | None,
    rate: float | None,
):
    """The stream a run reads with --source kinesis (None for the generator or files); refuses what
    a run over Kinesis cannot do yet, before anything starts."""
    from core.kinesis import KinesisEndpoint

    if source not in ("generator", "kinesis"):
        raise ConfigError(f"unknown --source {source!r}", hint="use generator or kinesis")
    if source == "generator":
        given = [f for f, v in (("--stream", stream), ("--endpoint-url", endpoint_url)) if v is not None]
        if given:
            raise ConfigError(f"{given[0]} names a Kinesis stream", hint="add --source kinesis")
        return None
    if not stream:
        raise ConfigError("--source kinesis reads a stream", hint="pass --stream NAME (see `sponge produce`)")
    for flag, value in (("--input", input_dir), ("--rate", rate)):
        if value is not None:
            raise ConfigError(
                f"--source kinesis reads the stream's records; {flag} is for the other sources",
                hint=f"drop {flag} (`sponge produce --rate R` paces the stream)",
            )
    return KinesisEndpoint(stream, endpoint_url, region)


def follows(follow: bool | None, policy: str, input_dir: Path | None) -> bool:
    """Whether the run follows its input: as asked, else when a policy watches a run of files."""
    if follow is not None:
        return follow
    return policy != "none" and input_dir is not None


def check_policy(
    policy: str,
    offload_share: float | None,
    per_core_rate: float | None,
    rho: float | None,
    *,
    rate: float | None,
    input_dir: Path | None,
    kinesis: KinesisEndpoint | None = None,
) -> None:
    """Refuse a --policy that cannot work, before anything starts."""
    from core.spark.live_policy import POLICIES

    if policy not in POLICIES:
        raise ConfigError(f"unknown --policy {policy!r}", hint=f"use {', '.join(POLICIES)}")
    if policy == "sponge" and offload_share is not None:
        raise ConfigError(
            "--policy sponge decides the offloaded share itself; --offload-share fixes it for the whole run",
            hint="drop --offload-share (or drop --policy sponge for a fixed share)",
        )
    tuned = [flag for flag, v in (("--per-core-rate", per_core_rate), ("--rho", rho)) if v is not None]
    if tuned and policy != "sponge":
        raise ConfigError(
            f"{tuned[0]} tunes the sponge policy", hint=f"add --policy sponge, or drop {tuned[0]}"
        )
    if policy != "none" and rate is None and input_dir is None and kinesis is None:
        raise ConfigError(
            f"--policy {policy} watches the input's backlog, and generated events without --rate are all "
            "there at once (a backlog of the whole stream)",
            hint="pace them with --rate R, or read files with --input DIR",
        )


def live_policy(
    policy: str,
    config: RunConfig,
    per_core_rate: float | None,
    rho: float | None,
    *,
    resume: bool,
    settings: Path | None,
) -> LivePolicy:
    """The run's policy loop (core/spark/live_policy.py): the flags over sponge.toml's [policy] over the
    defaults; a resumed run appends to its decision log and history."""
    from core.config_file import policy_settings
    from core.spark.live_policy import LivePolicy, backlog_for

    profile = policy_settings(settings)
    job = config.job()
    offload = config.offload
    return LivePolicy(
        policy,
        config.output,
        backlog_for(
            config.input,
            list(job.sources.values()),
            config.follow,
            config.generator.schedule,
            config.generator.events,
            config.kinesis,
        ),
        per_core_rate=per_core_rate or profile.per_core_rate or DEFAULT_PER_CORE_RATE,
        rho=rho or profile.rho or DEFAULT_RHO,
        max_workers=offload.workers if offload is not None else 1,
        deadline_s=float(config.params.window_slide_s),  # recover within the query's window slide
        offload_cost=offload.offload_cost if offload is not None else 0.0,
        append=resume,
        labels={"job": job.name},
        emf=offload is not None and offload.target != "embedded",
    )


@contextmanager
def stopping_on_signals(stop: threading.Event) -> Iterator[None]:
    """Ctrl-C or SIGTERM sets `stop`: the run ends once its epoch in flight commits. A second one stops
    at once, as the signal would by itself (the checkpoint still lets `--resume` continue)."""

    def handle(signum: int, _frame: object) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()
        err.print(
            f"{signal.Signals(signum).name}: stopping once the epoch in flight commits (again: at once)"
        )

    previous = {s: signal.signal(s, handle) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


def register(app: typer.Typer) -> None:
    """Add `sponge run` to the app."""
    app.command()(run)

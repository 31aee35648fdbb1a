"""`sponge run`: stream a query through Spark, optionally offloading a share to Lambda workers."""

from __future__ import annotations

import json
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

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
from core.console import err, out


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
        bool,
        typer.Option(
            "--follow",
            help="With --input: keep reading the files that arrive, until Ctrl-C or SIGTERM, which stop the "
            "run once the epoch in flight has committed; `--resume` continues it (without --follow it reads "
            "the files there are and closes the last windows).",
        ),
    ] = False,
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
            help="Read records from DIR/<source>/*.jsonl instead of generating them: DIR/{person,auction,"
            "bid} for a query, one directory per source for your own job (--events and --seed are then "
            "unused, --rate is refused). Bad lines go to OUTPUT/dead_letter and are counted in summary.json.",
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
    inject: InjectOpt = None,
    driver_memory: DriverMemoryOpt = None,
    executor_memory: ExecutorMemoryOpt = None,
    state_store: StateStoreOpt = None,
    rocksdb_memory: RocksdbMemoryOpt = None,
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
    """Stream EVENTS generated NEXMark events (or the JSONL records of --input) through JOB on Spark.

    JOB is a NEXMark query or your own job file (FILE.py:NAME), which reads DIR/<source>/*.jsonl of
    --input for each of its sources; --events, --seed and the window options are the queries'.

    With --offload-share F, a share F of the records is routed to Lambda workers (transient
    operators) through the VM agent, and their results are merged back into Spark's state.

    Results and the checkpoint go to --output; a crashed or stopped run continues there with --resume.

    Memory (--driver-memory, --executor-memory, --state-store, --rocksdb-memory) is sized from this
    machine unless set; summary.json records it, and the JVM's log goes to OUTPUT/_logs/jvm.log.
    """
    from core.job import load
    from core.run_output import Existing
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig, executor_jvms, worker_memory_mb

    check_master(master)
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
        follow=follow,
        spark=SparkConfig(master=master, memory=memory, jvm_log=output / "_logs" / "jvm.log"),
        input=input_dir,
        offload=offload_config(
            offload_share,
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
        ),
        existing=Existing.RESUME if resume else Existing.REFUSE,
    )
    load(query, config.params)  # a wrong job fails here, on its line, before Spark starts
    what = f"the events of {input_dir}" if input_dir is not None else f"{events:,} events"
    stop = threading.Event()
    with (
        stopping_on_signals(stop),
        err.status(f"streaming {what} through {query} ({memory.describe()}) ...") as status,
    ):
        summary = run_query(
            config,
            progress=lambda p: status.update(
                f"{query}: epoch {p['batchId']}, {p['numInputRows']:,} records in the last epoch"
                + (" (stopping once it commits)" if stop.is_set() else "")
            ),
            stop=stop,
        )
    out.print(json.dumps(summary, indent=2))


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

"""The options several commands share, and the configuration values they turn into."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from core.errors import ConfigError
from router.dispatcher import DEFAULT_CHUNK_TIMEOUT_S

QueryArg = Annotated[str, typer.Argument(help="NEXMark query, q0..q8 (see `sponge queries`).")]
JobArg = Annotated[
    str,
    typer.Argument(
        metavar="JOB",
        help="A NEXMark query (q0..q8, see `sponge queries`) or your own job: FILE.py:NAME, the Job that "
        "FILE.py defines as NAME (core/job.py).",
    ),
]
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
    typer.Option(
        "--output",
        "-o",
        file_okay=False,
        help="Directory for Parquet results, summary.json and the run's checkpoint: new or empty (a run "
        "never writes into or deletes files it did not make), or the run to continue with --resume.",
    ),
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
WorkersOpt = Annotated[
    int | None,
    typer.Option(
        "--workers",
        min=1,
        help="Lambda workers the agent may run (default 2; needs --offload-share or --policy sponge, "
        "whose plans never ask for more).",
    ),
]
TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        help="Where workers run: embedded (worker processes on this machine running the Lambda handler).",
    ),
]
HandoffOpt = Annotated[
    str,
    typer.Option(
        "--handoff",
        help="How a keyed operator's state (Q3's join, Q4's and Q6's winners) goes to the workers: lazy "
        "(a key's state moves with its first record there; the rest stays on the VM), progressive (as "
        "lazy, and each batch also moves --round-keys more of the group's keys until none is left on "
        "the VM) or all-at-once (a key group's whole state moves with its first batch). bench.handoff "
        "measures all three.",
    ),
]
SubscalesOpt = Annotated[
    int,
    typer.Option(
        "--subscales",
        min=1,
        help="How many seals a keyed operator's task runs at once in a batch, each a run of its key "
        "groups (default 1: on a VM of few cores one seal costs least; more let many workers step "
        "one task's groups side by side). bench.handoff --subscales measures it.",
    ),
]
RoundKeysOpt = Annotated[
    int | None,
    typer.Option(
        "--round-keys",
        min=1,
        help="With --handoff progressive: the keys a batch moves to the workers besides those its "
        "records name (default 2,000).",
    ),
]
WorkerNetnsOpt = Annotated[
    str | None,
    typer.Option(
        "--worker-netns",
        help="Embedded target: start the workers in this network namespace (made with `ip netns add` and "
        "joined to this one), so they reach the agent only over the network at --advertise, as workers "
        "on another machine do.",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        dir_okay=False,
        help="Settings file (TOML) under the flags: [data_plane] bind, advertise, transport; [policy] "
        "rho (the sponge policy) and per_core_rate (sponge run; a drill measures its own). "
        "Default: ./sponge.toml when there is one.",
    ),
]
TransportOpt = Annotated[
    str | None,
    typer.Option(
        "--transport",
        help="The data plane between the VM agent and its callers and workers: tls (a CA and server "
        "certificate made for the run; plaintext callers are refused), mtls (callers and each worker "
        "also present a certificate of the run's CA) or plaintext. Default: tls unless the agent is "
        "reached on loopback only.",
    ),
]
BindOpt = Annotated[
    str | None,
    typer.Option(
        "--bind",
        help="Address the VM agent listens on. Default: 127.0.0.1 for --target embedded, 0.0.0.0 (every "
        "interface) for a deployed function, whose workers dial in from their own network.",
    ),
]
AdvertiseOpt = Annotated[
    str | None,
    typer.Option(
        "--advertise",
        help="Host the agent's workers and callers dial, e.g. the VM's private address in the Lambda's "
        "VPC. Default: --bind, or this machine's routable address when --bind is 0.0.0.0.",
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
KeepWarmOpt = Annotated[
    float | None,
    typer.Option(
        "--keep-warm",
        metavar="SECONDS",
        help="While no worker is busy, warm --workers Lambda environments every SECONDS of idleness, so "
        "that a burst after a quiet spell finds them warm instead of paying cold starts (0: never). "
        "Default 240: under the 600 s LocalStack keeps an idle environment and the 5-minute ping "
        "interval usual on AWS, which publishes no figure (docs/adr/0039).",
    ),
]
ChunkTimeoutOpt = Annotated[
    float | None,
    typer.Option(
        "--chunk-timeout",
        min=0.1,
        help="Seconds a worker may hold a chunk before the agent takes it back and gives it to another "
        f"worker (default {DEFAULT_CHUNK_TIMEOUT_S:g}); a stalled worker (slow-worker) costs this long.",
    ),
]
InjectOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--inject",
        help="Inject a fault, KIND:key=value[,key=value]; repeat for several. Kinds: "
        "kill-worker:every=2s (kill a busy worker every 2 s), throttle:share=0.2 (20% of invokes throttled), "
        "slow-worker:share=0.1,delay=30s (10% of chunks stall 30 s on their worker), "
        "agent-restart:at=10s (kill and restart the VM agent), agent-kill:at=10s (SIGKILL the agent and "
        "leave it to its launcher to start again), task-failure:share=0.05 (5% of source "
        "tasks fail once), query-restart:at=15s (stop the query and resume it from its checkpoint), "
        "driver-kill:at=15s (the driver SIGKILLs itself, as a crash; continue with --resume). "
        "Instead of a time, a fault can wait for an event, which fires at the same point on any machine: "
        "agent-restart:after-epoch=3, query-restart:after-epoch=3 and driver-kill:after-epoch=3 (once "
        "epoch 3 has committed), "
        "kill-worker:after-chunks=10 (once, after the 10th chunk went out). Needs --offload-share.",
    ),
]


DriverMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--driver-memory",
        metavar="SIZE",
        help="Heap of Spark's driver JVM, e.g. 4g or 512m (at least 512m). Under a local[N] master every "
        "task runs in it, so it bounds what Spark holds at once (with --state-store hdfs: all state). "
        "Default: sized from this machine, 1/4 of its RAM, at most 1/2 of the memory available at "
        "start and at most 8g. A run that dies of OutOfMemoryError names this flag.",
    ),
]
ExecutorMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--executor-memory",
        metavar="SIZE",
        help="Heap of each executor JVM when tasks run in executors of their own (a standalone cluster: "
        "the drill's vmbase/vminit VMs, --master local-cluster[...] or spark://...); each standalone "
        "worker offers exactly this much. Refused where there are none (local[N]: use --driver-memory). "
        "Default: 1/8 of this machine's RAM, at most 1/4 of the available memory and at most 8g.",
    ),
]
StateStoreOpt = Annotated[
    str | None,
    typer.Option(
        "--state-store",
        metavar="rocksdb|hdfs",
        help="Where Spark keeps operator state. rocksdb (default): off the JVM heap, in RocksDB's "
        "native memory (bounded by --rocksdb-memory) and on local disk. hdfs: Spark's HDFS-backed store, "
        "every key in maps on the JVM heap (a big state needs a big --driver-memory). Queries with "
        "transformWithState operators need rocksdb; hdfs is refused for them.",
    ),
]
RocksdbMemoryOpt = Annotated[
    str | None,
    typer.Option(
        "--rocksdb-memory",
        metavar="SIZE",
        help="Memory all RocksDB state stores of one JVM share, block cache and write buffers included "
        "(RocksDB's bounded memory usage), off the heap. Default: 1/16 of this machine's RAM, at most 1/8 "
        "of the available memory and at most 2g. Refused with --state-store hdfs.",
    ),
]


def memory_config(
    driver_memory: str | None,
    executor_memory: str | None,
    state_store: str | None,
    rocksdb_memory: str | None,
    *,
    executors: int,
    no_executors: str,
    executor_cap_mb: int | None = None,
):
    """The run's memory: the flags given, the rest sized from this machine's RAM (read here, once)."""
    from core.spark.session import MachineMemory, MemoryConfig

    return MemoryConfig.sized(
        MachineMemory.detect(),
        driver_memory=driver_memory,
        executor_memory=executor_memory,
        state_store=state_store,
        rocksdb_memory=rocksdb_memory,
        executors=executors,
        no_executors=no_executors,
        executor_cap_mb=executor_cap_mb,
    )


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
    share: float | None,
    workers: int | None,
    target: str,
    inject: list[str],
    invocation_type: str = "Event",
    default_workers: int = 2,
    handoff: str = "lazy",
    subscales: int = 1,
    round_keys: int | None = None,
    transport: str | None = None,
    bind: str | None = None,
    advertise: str | None = None,
    settings: Path | None = None,
    worker_netns: str | None = None,
    chunk_timeout_s: float | None = None,
    keep_warm_s: float | None = None,
):
    """The run's offloading (None without --offload-share); `workers` None takes `default_workers`.
    The offloading flags without --offload-share would do nothing, so they are refused. The agent's
    addresses and transport come from the flags over the settings file `settings` (core/config_file.py)."""
    from core.config_file import data_plane
    from core.fault_spec import parse_all
    from core.spark.offload_session import OffloadConfig

    faults = parse_all(inject)
    if share is None:
        given = [
            flag
            for flag, set_ in (
                ("--inject", bool(faults)),
                ("--invocation-type", invocation_type != "Event"),
                ("--handoff", handoff != "lazy"),
                ("--subscales", subscales != 1),
                ("--round-keys", round_keys is not None),
                ("--transport", transport is not None),
                ("--bind", bind is not None),
                ("--advertise", advertise is not None),
                ("--worker-netns", worker_netns is not None),
                ("--chunk-timeout", chunk_timeout_s is not None),
                ("--keep-warm", keep_warm_s is not None),
                ("--workers", workers is not None),
                ("--target", target != "embedded"),
            )
            if set_
        ]
        if given:
            raise ConfigError(
                f"{given[0]} needs --offload-share", hint="add e.g. --offload-share 0.5, or --policy sponge"
            )
        return None
    workers = default_workers if workers is None else workers
    return OffloadConfig(
        share=share,
        workers=workers,
        target=target,
        faults=faults,
        invocation_type=invocation_type,
        fetch=handoff,
        subscales=subscales,
        **({} if round_keys is None else {"round_keys": round_keys}),
        worker_netns=worker_netns,
        **({} if chunk_timeout_s is None else {"chunk_timeout_s": chunk_timeout_s}),
        **({} if keep_warm_s is None else {"keep_warm_s": keep_warm_s}),
        **data_plane(settings, bind, advertise, transport).options(),
    )

"""Run a job (a NEXMark query, or a user's job file: core/job.py) on Spark Structured Streaming to the
end of its event stream.

The source ends with an end-of-stream punctuation whose event time closes every window; the run is
over once Spark reports that watermark, i.e. once the batch that applied it has committed.

With `input` set, records come from `input/<source>/*.jsonl` (the bounded "nexmark-files" source)
instead of the generator; lines that fail validation go to `output/dead_letter/` and are counted in
summary.json, and the run keeps going. A user's job always reads its sources so.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.ablations import ABLATIONS, BASELINES, without_merge_operators
from core.errors import ConfigError, SpongeError
from core.fault_spec import Triggers
from core.job import Job, canonical_ref, is_file_ref, load
from core.kinesis import KinesisEndpoint
from core.nexmark.generator import GeneratorConfig, event_ids
from core.nexmark.params import QueryParams
from core.offload_chains import OffloadChain, offload_chains
from core.plan import Source
from core.rewrite import rewrite
from core.run_output import Existing, claim
from core.spark.jvm_failure import JvmWatch
from core.spark.offload_session import OFFLOAD_DIR, OffloadConfig, OffloadSession
from core.spark.progress_feed import ProgressFeed
from core.spark.session import MemoryConfig, SparkConfig, current_jvm, spark_session
from core.spark.streams import DEAD_LETTER_DIR, nexmark_sources

CLOSING_PROGRESS_S = 30.0  # how long the closing epoch's progress may take to reach the feed
WAIT_S = 0.25  # the longest wait for progress between checks of the restart schedule and the timeout
FAILURE_WAIT_S = 3.0  # a failed query's JVM may be on its way out (Spark's shutdown hooks): wait that long


@dataclass(frozen=True)
class RunConfig:
    query: str  # a NEXMark query, or a job file: FILE.py:NAME (core/job.py)
    generator: GeneratorConfig
    output: Path
    params: QueryParams = field(default_factory=QueryParams)
    pace: bool = False
    max_events_per_batch: int = 200_000
    min_partitions: int = 1  # the fewest tasks a generated epoch is split into: the VM cores (source.py)
    tasks_per_epoch: int = 0  # > 0: every generated epoch in exactly this many tasks (source.py split_step)
    # The VM capacity scale the driver publishes for the source's cap (core/spark/admission.py); None:
    # the cap stays max_events_per_batch (times the offloaded share's scale).
    capacity_file: Path | None = None
    spark: SparkConfig = field(default_factory=SparkConfig)
    plain: bool = False  # lower without proxies (bench baseline)
    timeout_s: float = 1800.0
    input: Path | None = None  # read input/<entity>/*.jsonl instead of generating events
    max_files_per_batch: int = 64  # with `input`: the most files of a source one micro-batch reads
    follow: bool = False  # with `input`: keep reading files as they arrive, until stopped
    offload: OffloadConfig | None = None  # route records to Lambda workers (None: no routers at all)
    existing: Existing = Existing.REFUSE  # what to do with a sponge run already in `output`
    kinesis: KinesisEndpoint | None = None  # read the records of this stream (core/spark/kinesis_source.py)
    ablation: str | None = None  # run as this baseline of the paper instead (core/ablations.py)

    def __post_init__(self) -> None:
        # Executors of a cluster run in their worker's directory, not the driver's: every path that
        # travels to them in a source's options or a service is made absolute here, once.
        for name in ("output", "input", "capacity_file"):
            path = getattr(self, name)
            if path is not None and not path.is_absolute():
                object.__setattr__(self, name, path.absolute())
        if self.max_events_per_batch <= 0:
            raise ConfigError("max events per batch must be positive", hint="pass a positive --batch-events")
        if self.min_partitions <= 0:
            raise ConfigError("an epoch needs at least one task", hint="set min_partitions to the VM cores")
        if self.tasks_per_epoch < 0:
            raise ConfigError("tasks per epoch cannot be negative", hint="0 splits epochs by their size")
        if self.max_files_per_batch <= 0:
            raise ConfigError("max files per batch must be positive", hint="pass a positive --batch-files")
        if self.input is not None and self.pace:
            raise ConfigError("--rate paces generated events only", hint="drop --rate when using --input")
        if self.input is not None and self.input.resolve().is_relative_to(self.output.resolve()):
            raise ConfigError(
                f"the output {self.output} contains the input {self.input}; a run's output is its own",
                hint="pass an --output outside the --input directory",
            )
        if self.offload is not None and self.plain:
            raise ConfigError(
                "offloading needs the rewritten plan", hint="drop plain when passing --offload-share"
            )
        if self.kinesis is not None and (self.input is not None or self.pace):
            raise ConfigError(
                "a run over a Kinesis stream reads its records as they come",
                hint="drop --input and --rate; pace the stream with `sponge produce --rate`",
            )
        if self.follow and self.input is None:
            raise ConfigError("--follow reads the files of --input as they arrive", hint="pass --input DIR")
        if is_file_ref(self.query) and self.input is None and self.kinesis is None:
            raise ConfigError(
                f"{self.query} reads its sources from files, and no --input was given",
                hint="pass --input DIR, with DIR/<source>/*.jsonl for each of the job's sources",
            )
        if self.ablation is not None and self.ablation not in ABLATIONS:
            raise ConfigError(f"unknown baseline {self.ablation!r}", hint=f"one of {', '.join(ABLATIONS)}")
        if self.ablation is not None and self.plain:
            raise ConfigError("a baseline runs the rewritten plan", hint="drop plain")
        if self.spark.memory.state_store != "rocksdb":
            refuse_state_store(self.job(), self.spark.memory.state_store)

    def job(self) -> Job:
        """The job the run streams (its file is read again each time: a resumed run reads it anew)."""
        return load(self.query, self.params)

    def identity(self) -> dict[str, Any]:
        """What fixes the run's results: a resumed run must be the same job (core/run_output.py)."""
        generated = self.input is None and self.kinesis is None  # they mean nothing to a run of records
        stream = {"kinesis": self.kinesis.stream} if self.kinesis is not None else {}
        return {
            **stream,
            "query": canonical_ref(self.query),
            "events": self.generator.events if generated else None,
            "seed": self.generator.seed if generated else None,
            "schedule": self.generator.schedule.text() if generated else None,
            "window_size_s": self.params.window_size_s,
            "window_slide_s": self.params.window_slide_s,
            "input": str(self.input.resolve()) if self.input is not None else None,
            "plain": self.plain,
            "offloaded": self.offload is not None,
            **({"ablation": self.ablation} if self.ablation is not None else {}),
        }


def refuse_state_store(job: Job, state_store: str) -> None:
    """Refuse a state store the job's plan cannot run on: transformWithState needs RocksDB."""
    from core.spark.lower import needs_rocksdb

    plan = job.plan()
    if needs_rocksdb(plan):
        stateful = sorted({n.op.kind for n in plan.nodes if n.op.stateful})
        raise ConfigError(
            f"{job.name} runs its stateful operators ({', '.join(stateful)}) on transformWithState, which "
            f"only the RocksDB state store serves; --state-store {state_store} cannot run it",
            hint=f"drop --state-store {state_store} (RocksDB is the default)",
        )


class RunHooks:
    """What a caller (a policy loop, a drill) does while the query streams; each step does nothing
    unless a subclass says otherwise."""

    def started(self, spark: Any, session: OffloadSession | None, origin: float) -> None:
        """The query is about to start; `origin` is when the source's pace began (unix seconds)."""

    def stopped(self) -> None:
        """The query has ended (or failed); stop touching the session."""

    def restart_due(self) -> bool:
        """Whether the query should stop and restart from its checkpoint now: a baseline without
        transient operators moves work by migrating tasks (core/ablations.py). Asked while it runs."""
        return False

    def summary(self) -> dict[str, Any]:
        """What the caller adds to the run's summary under "policy" ({} for nothing)."""
        return {}


def run_query(
    config: RunConfig,
    progress: Callable[[dict], None] | None = None,
    hooks: RunHooks | None = None,
    stop: threading.Event | None = None,
) -> dict:
    """Stream the query to completion (or, once `stop` is set, to the end of the epoch in flight), write
    Parquet results and summary.json; return the summary.

    The output is claimed first (core/run_output.py): a new or empty directory, or, with
    `existing=Existing.RESUME`, the same run's, continued from its checkpoint. A JVM that dies under
    the run is reported as a JvmDiedError that says why (core/spark/jvm_failure.py).
    """
    resumed = claim(config.output, config.identity(), config.existing)
    watch = JvmWatch(config.spark.memory)
    with watch.reporting():
        return _run_query(config, watch, resumed, progress, hooks, stop)


def _run_query(
    config: RunConfig,
    watch: JvmWatch,
    resumed: bool,
    progress: Callable[[dict], None] | None = None,
    hooks: RunHooks | None = None,
    stop: threading.Event | None = None,
) -> dict:
    from core.spark.file_source import register as register_file_source
    from core.spark.file_source import require_entity_dirs
    from core.spark.input_validation import dead_letter_summary
    from core.spark.lower import lower_plain, lower_rewritten

    job = config.job()
    logical = job.plan()
    if config.ablation is not None:
        logical = without_merge_operators(logical)
    rewritten = rewrite(logical)
    own = job.sources if is_file_ref(config.query) else {}
    if config.input is not None and not config.follow:  # a followed source's directory may come later
        require_entity_dirs(config.input, list(job.sources.values()))
    out = config.output
    spark = spark_session(config.spark)
    register_file_source(spark)
    if config.kinesis is not None:
        from core.spark.kinesis_source import register as register_kinesis_source

        register_kinesis_source(spark)
    started = time.time()
    n_sources = len([n for n in logical.nodes if isinstance(n.op, Source)])
    session = None
    restarts, kills = Triggers([], []), Triggers([], [])
    if config.offload is None:
        sources = nexmark_sources(spark, config, pace_origin=started, schemas=own)
        sinks = lower_plain(logical, sources) if config.plain else lower_rewritten(rewritten, sources)
    else:
        routers = config.ablation is None or BASELINES[config.ablation].routers
        chains = tuple(offload_chains(logical)) if routers else ()
        # A user's job sends its plan as data, and so does a baseline's plan of a built-in query.
        own_plan = logical if is_file_ref(config.query) or config.ablation is not None else None
        session = OffloadSession(config.offload, out, config.query, config.params, own_plan, own)
        session.start()
        # The clock starts once the agent and its warm pool are up: a burst meets a job that is running,
        # and the agent is a long-lived service beside it, not something the burst waits for.
        started = time.time()
        session.schedule_faults(started)
        restarts, kills = session.query_restarts(), session.driver_kills()
        progress = session.watching_epochs(progress)
        sources = nexmark_sources(spark, config, started, session.local_routes(chains), schemas=own)
        offloaded = session.offloaded(spark, config, started)
        # Workers' ranked candidates, merged on the VM, are a merge operator: no baseline has them.
        ranks = session.rank_service if config.ablation is None else None
        sinks = lower_rewritten(rewritten, sources, chains, offloaded, session.seal_service, ranks)
        n_sources += len(chains)  # each chain's source is read twice: the VM share and the workers' share
    (sink_df,) = sinks.values()
    if hooks is not None:
        hooks.started(spark, session, started)
    try:
        epochs_progress = stream_to_end(
            sink_df,
            out,
            f"sponge_{job.name}_{int(started)}",
            n_sources,
            config.generator.events,
            timeout_s=float("inf") if config.follow else config.timeout_s,
            started=started,
            progress=progress,
            restarts=restarts,
            on_restart=session.query_restarted if session is not None else None,
            migrate=hooks.restart_due if hooks is not None else None,
            kills=kills,
            memory=config.spark.memory,
            watch=watch,
            stop=stop,
            endless=config.follow,
        )
    finally:
        if hooks is not None:
            hooks.stopped()
        offload_summary = session.stop() if session is not None else {}
    epochs = len(epochs_progress)
    wall_s = time.time() - started
    stopped = stop is not None and stop.is_set()
    entities = [n.op.entity for n in logical.nodes if isinstance(n.op, Source)]
    routed = 0
    read = config.input is not None or config.kinesis is not None  # records read, not generated
    if read and session is not None:
        # Routed streams also carry heartbeats and workers' results: the VM's reads noted each task's
        # records (over the whole run, a resumed one included).
        from router.source_router import routed_counts

        records_in, routed = routed_counts(out / OFFLOAD_DIR, entities)
    elif read:
        punctuations = 0 if stopped or config.follow else n_sources
        records_in = sum(p["numInputRows"] for p in epochs_progress) - punctuations
    else:  # routed streams also carry heartbeats and workers' results: count the records themselves
        records_in = sum(len(event_ids(e, 0, config.generator.events)) for e in entities)
        routed = routed_to_workers(config, out, chains) if session is not None else 0
    summary = {
        "query": config.query,
        "job": job.name,
        "events": records_in if read else config.generator.events,
        "seed": None if read else config.generator.seed,
        "records_in": records_in,
        "records_local": records_in - routed,
        "records_routed_to_workers": routed,
        "records_offloaded": 0,
        "operators_offloaded": {},
        "handoffs": {},
        "epochs": epochs,
        "wall_s": round(wall_s, 3),
        "events_per_s": round(records_in / wall_s, 1) if wall_s > 0 else None,
        "rewrite_ms": round(rewritten.rewrite_ms, 3),
        "plan": "plain" if config.plain else "rewritten",
        "resumed": resumed,
        "stopped": stopped,  # by a signal, after its epoch in flight: `--resume` continues it
        "memory": memory_in_force(config.spark),
        **offload_summary,
    }
    if hooks is not None and (extra := hooks.summary()):
        summary["policy"] = extra
    if config.kinesis is not None:
        summary["kinesis"] = config.kinesis.stream
    if config.input is not None:
        summary["input"] = str(config.input)
    if read:
        summary["dead_letter"] = dead_letter_summary(out / DEAD_LETTER_DIR)
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary


def memory_in_force(spark: SparkConfig) -> dict[str, Any]:
    """The run's memory as summary.json records it: the heaps the JVM was started with (a JVM started
    earlier in this process keeps its own), the run's state store, and where the values came from."""
    jvm = current_jvm()
    started = jvm.memory if jvm is not None else spark.memory
    recorded = spark.memory.to_json()
    recorded["driver_memory"] = started.to_json()["driver_memory"]
    recorded["executor_memory"] = started.to_json()["executor_memory"]
    recorded["jvm_log"] = str(jvm.log) if jvm is not None and jvm.log is not None else None
    return recorded


def routed_to_workers(config: RunConfig, out: Path, chains: Sequence[OffloadChain]) -> int:
    """Records the routing log sent to the workers' share, over the chains' sources (deterministic; a
    keyed stage's inputs by their records' key groups)."""
    import pyarrow as pa

    from core.nexmark.generator import generate_ids
    from core.offload_plan import key_groups_of
    from router.routing_log import RoutingLog, routed_mask

    segments = RoutingLog(out / OFFLOAD_DIR).segments()
    total = 0
    for c in chains:
        ids = event_ids(c.entity, 0, config.generator.events)
        groups = None
        if c.keys:
            keys = pa.Table.from_batches([generate_ids(config.generator, c.entity, ids, list(c.keys))])
            groups = key_groups_of(keys.select(list(c.keys)))
        total += int(routed_mask(segments, ids, groups).sum())
    return total


def source_offset(text: str | None) -> dict[str, Any]:
    """A source's offset in a progress event, or {} when it has none: Spark writes a missing one as JSON
    null, which PySpark passes on as the text "null" (seen: a resumed file run's latest offset, which
    then failed the run with "argument of type 'NoneType' is not iterable")."""
    try:
        value = json.loads(text) if text else None
    except ValueError:
        value = None
    return value if isinstance(value, dict) else {}


def source_at_end(source: dict, total: int) -> bool:
    """The source has delivered its punctuation: the generator's last offset is `total` (its events + 1);
    a bounded file source reports its last one (file count + 1) as latestOffset."""
    end = source_offset(source.get("endOffset"))
    if "shards" in end:  # a Kinesis stream: every shard's end-of-stream marker has been read
        return bool(end.get("done"))
    if "files" in end:
        latest_offset = source_offset(source.get("latestOffset"))
        return "files" in latest_offset and end["files"] >= latest_offset["files"]
    return end.get("event", 0) >= total


def stream_to_end(
    df,
    out: Path,
    name: str,
    n_sources: int,
    events: int,
    *,
    timeout_s: float,
    started: float,
    progress: Callable[[dict], None] | None = None,
    restarts: Triggers | None = None,
    on_restart: Callable[[], None] | None = None,
    migrate: Callable[[], bool] | None = None,
    kills: Triggers | None = None,
    memory: MemoryConfig,
    watch: JvmWatch | None = None,
    stop: threading.Event | None = None,
    endless: bool = False,
) -> list[dict]:
    """Stream `df` into Parquet under `out` until every source has delivered its punctuation and
    the closing no-data epoch has run; return the progress of every epoch that read data.

    Once `stop` is set the query stops as soon as no epoch is in flight (so the last one commits, and a
    resumed run starts at the next), without waiting for the end of the stream; an `endless` stream
    (files followed as they arrive) ends only so.

    When one of `restarts` is due, the query is stopped and resumed from its checkpoint, as after a
    driver restart, and so it is whenever `migrate` says so; when one of `kills` is due, this process
    SIGKILLs itself, as a crashed driver (`sponge run --resume` continues from the checkpoint). Shared
    by run_query and the benchmark's hand-written queries, so both end the same way. `memory` gives the state
    store a new checkpoint is made with (a resumed one keeps its own provider) and its settings, set on
    the session here since its JVM may be shared by runs of other stores. `watch` (default: one on
    this process's JVM) turns the JVM's death into the error that says why (core/spark/jvm_failure.py)
    instead of a wait for progress that never comes.
    """
    watch = watch or JvmWatch()
    for key, value in memory.state_store_conf():
        df.sparkSession.conf.set(key, value)

    def start():
        return (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(out / "_checkpoint"))
            .outputMode("append")
            .trigger(processingTime="0 seconds")
            .queryName(name)
            .start()
        )

    restarts = restarts or Triggers([], [])
    kills = kills or Triggers([], [])
    total = events + 1  # the punctuation sits at offset `events`
    seen: dict[int, dict] = {}
    latest: dict | None = None

    def collect(timeout_s: float) -> None:
        """Record the epochs that read data (a batch replayed after a restart counts once)."""
        nonlocal latest
        for p in feed.take(timeout_s):
            latest = p
            if p["batchId"] not in seen and p["numInputRows"] is not None and "addBatch" in p["durationMs"]:
                seen[p["batchId"]] = p
                if progress:
                    progress(p)
        watch.check()
        if feed.failure is not None:
            died = watch.error(feed.failure, wait_s=FAILURE_WAIT_S)
            if died is not None:
                raise died
            raise SpongeError(f"the streaming query failed: {feed.failure.splitlines()[0]}")

    def due(triggers: Triggers) -> bool:
        return triggers.due(time.time() - started, max(seen, default=-1))

    def finished() -> bool:
        return (
            not endless
            and latest is not None
            and len(latest["sources"]) == n_sources
            and all(source_at_end(s, total) for s in latest["sources"])
        )

    def restarted(query: Any) -> Any:
        feed.stopping(str(query.runId))
        query.stop()
        return start()

    feed = ProgressFeed(name)
    streams = df.sparkSession.streams
    streams.addListener(feed)
    query = start()
    try:
        while True:
            if stop is not None and stop.is_set():
                _let_the_epoch_commit(query, collect)
                return list(seen.values())
            if due(kills):  # no clean-up of any kind: the checkpoint is all a resumed run gets
                os.kill(os.getpid(), signal.SIGKILL)
            if finished():  # before any restart: see below
                break
            if due(restarts):
                query = restarted(query)
                if on_restart:
                    on_restart()
            elif migrate is not None and migrate():
                query = restarted(query)
            if time.time() - started > timeout_s:
                raise SpongeError(
                    f"the query did not finish in {timeout_s:.0f}s",
                    hint="raise the timeout or lower --events",
                )
            collect(WAIT_S)
        # Runs the no-data epoch that applies the end-of-stream watermark and closes the last windows;
        # its progress reaches the feed shortly after.
        query.processAllAvailable()
        closing = query.lastProgress["batchId"]
        deadline = time.time() + CLOSING_PROGRESS_S
        while max(seen, default=-1) < closing and time.time() < deadline:
            collect(deadline - time.time())
        # A restart due once every source has read its end (an epoch trigger on the last epochs) comes
        # after the closing epoch. Spark runs a no-data epoch only after one it ran itself: a query
        # restarted between its last data epoch and its closing one waits for data that never comes,
        # and its last windows never close.
        while due(restarts):
            query = restarted(query)
            if on_restart:
                on_restart()
            query.processAllAvailable()
    finally:
        if not watch.died():  # a dead JVM answers nothing; the error in flight says why
            streams.removeListener(feed)  # first: the stop's event must not call into a leaving Python
            query.stop()
    return list(seen.values())


EPOCH_COMMIT_WAIT_S = 120.0  # the longest a stop waits for the epoch in flight to commit


def _let_the_epoch_commit(query: Any, collect: Callable[[float], None]) -> None:
    """Wait until no trigger is active (the epoch in flight has committed), then return: the caller's
    `finally` stops the query. Past EPOCH_COMMIT_WAIT_S the query is stopped mid-epoch, which is still
    safe: Spark replays an uncommitted epoch from its checkpoint."""
    deadline = time.time() + EPOCH_COMMIT_WAIT_S
    while query.status.get("isTriggerActive") and time.time() < deadline:
        collect(WAIT_S)
    collect(0.0)

"""The "nexmark" PySpark data source: one NEXMark entity as a batch or streaming DataFrame.

Why a Python data source: the events are generated inside Spark's Python workers from the same
counter-based generator the batch reference uses, so a streaming run and the reference see identical
events without a broker or files in between, and a micro-batch is replayable from its offsets alone.

Offsets are `{"event": n}`, a global event index shared by the three entity streams. Position
`events` (one past the last event) is the END-OF-STREAM punctuation: the partition covering it adds
one row whose date_time is END_OF_STREAM_TIME_US and whose other columns are null. Spark only
advances a watermark on data, so without that row the last windows would never close; the lowering
puts `withWatermark("date_time", ...)` first and then filters `date_time < END_OF_STREAM_TIME`.

Options (all strings): entity (required), events (required), seed (0), schedule (RateSchedule text,
"10000"), pace ("none" | "arrival"), pace_origin (unix seconds of event 0's release; default: when
the stream reader is created), max_events_per_batch (200000), records_per_task (200000, the cap's: a
task covers the offsets that hold about this many of the entity's records, so a person task covers 50
times the offsets of a bid task; a Python source task costs ~0.1 s whatever it holds, ADR 0016, 0056),
min_partitions (1: the fewest tasks an epoch is split into, as Kafka's source has it; a run sets its
VM cores, see `split_step`), tasks (0; else exactly this many tasks per epoch, whatever they hold: a drill's
warm-up sets its executors' task slots, see `split_step`), capacity_file (the run's VM capacity
scale, which multiplies max_events_per_batch: core/spark/admission.py).
When a paced query restarts from a checkpoint, pass pace_origin explicitly: otherwise the clock
restarts and the query waits until it catches up with the checkpointed offset.

Routed reads (router/source_router.py, ADR 0005): with route=local the stream keeps the records the
routing log leaves on the VMs; with route=offload it sends the others through the VM agent and yields
what the workers return. Options: route ("none" | "local" | "offload"), offload_dir (the routing
log and current plan), and for offload: program (ProgramSpec JSON), agent (host:port), secret_file,
event_time, chunk_rows, parallelism, direct_sink (the output directory, when the agent writes the
chain's rows there: the stream's offsets then carry a `direct_sink` tag); fail_share and fault_dir
inject task failures.

The reader supports Trigger.AvailableNow (the target is fixed when Spark prepares the trigger): it
then runs as many micro-batches as needed plus the final no-data batch that closes the windows.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from core.direct_sink import DIRECT_SINK_TAG
from core.errors import ConfigError
from core.nexmark.generator import entity_share
from core.nexmark.schedule import RateSchedule
from core.nexmark.schema import check_entity, spark_ddl
from core.offload_plan import expected_offloaded_share
from router.source_router import OFFLOAD as OFFLOAD_ROUTE
from router.source_router import RouteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from core.nexmark.generator import GeneratorConfig
    from router.routing_log import Segment

SOURCE_NAME = "nexmark"
PACES = ("none", "arrival")
MAX_TASK_STRETCH = 16  # a routed task covers at most this many times offsets_per_task offsets
SPLIT_FLOOR = 8  # min_partitions never makes a task hold less than records_per_task / SPLIT_FLOOR (25,000)
ROUTING_RESERVE = 1_000_000  # events the routing log's mark on disk runs ahead (~10 s of a drill's input)
MAX_EVENTS_PER_BATCH = 200_000
# A task holds up to an epoch the cap admits per VM core, so a steady epoch is read in one task per core
# and the line where it splits (one and a half tasks, see split_step) lies beyond the cap. At 100,000 the
# line sat at the stable rate's own epochs on a slow day, and a run whose epochs were a little longer
# paid a second task per epoch and kept them longer (docs/adr/0056).
RECORDS_PER_TASK = MAX_EVENTS_PER_BATCH


@dataclass(frozen=True)
class SourceOptions:
    """The parsed, validated options; parsing happens once, when Spark instantiates the source."""

    entity: str
    seed: int
    events: int
    schedule: RateSchedule
    pace: str = "none"
    pace_origin: float | None = None
    max_events_per_batch: int = MAX_EVENTS_PER_BATCH
    records_per_task: int = RECORDS_PER_TASK
    min_partitions: int = 1
    tasks: int = 0  # > 0: every epoch in exactly this many tasks (split_step)
    route: RouteOptions | None = None
    capacity_file: Path | None = None  # the run's VM capacity scale (core/spark/admission.py)

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> SourceOptions:
        """Read the string options of `spark.read(Stream).format("nexmark").option(...)`."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if "entity" not in opts:
            raise ConfigError(
                "the nexmark source needs an entity option",
                hint='add .option("entity", "person" | "auction" | "bid")',
            )
        if "events" not in opts:
            raise ConfigError(
                "the nexmark source needs an events option",
                hint='add .option("events", N) with the number of events in all entities',
            )
        pace = opts.get("pace", "none").strip().lower()
        if pace not in PACES:
            raise ConfigError(f"unknown pace {pace!r}", hint=f"use one of {', '.join(PACES)}")
        origin = opts.get("pace_origin")
        parsed = cls(
            entity=check_entity(opts["entity"].strip().lower()),
            seed=_integer(opts, "seed", 0, minimum=0),
            events=_integer(opts, "events", 0, minimum=0),
            schedule=RateSchedule.parse(opts.get("schedule", "10000")),
            pace=pace,
            pace_origin=None if origin is None else _real(origin, "pace_origin"),
            max_events_per_batch=_integer(opts, "max_events_per_batch", MAX_EVENTS_PER_BATCH, minimum=1),
            records_per_task=_integer(opts, "records_per_task", RECORDS_PER_TASK, minimum=1),
            min_partitions=_integer(opts, "min_partitions", 1, minimum=1),
            tasks=_integer(opts, "tasks", 0, minimum=0),
            route=RouteOptions.parse(opts),
            capacity_file=Path(opts["capacity_file"]) if opts.get("capacity_file") else None,
        )
        parsed.generator_config()  # validate the generator's own constraints up front
        return parsed

    def generator_config(self) -> GeneratorConfig:
        from core.nexmark.generator import GeneratorConfig

        return GeneratorConfig(seed=self.seed, events=self.events, schedule=self.schedule)

    @property
    def offsets_per_task(self) -> int:
        """Offsets of one task: those holding about `records_per_task` of the entity's records."""
        return max(1, int(self.records_per_task / entity_share(self.entity)))

    @property
    def end_offset(self) -> int:
        """One past the punctuation position: `events` real events plus the end-of-stream row."""
        return self.events + 1


@dataclass(frozen=True)
class EventRange(InputPartition):
    """Global events [start, end) of one Spark task; `punctuate` adds the end-of-stream row."""

    start: int
    end: int
    punctuate: bool = False
    segments: tuple[Segment, ...] = ()  # the routing log's plans for this range (routed streams)


def event_ranges(start: int, end: int, step: int, events: int, punctuate: bool) -> list[EventRange]:
    """Split [start, end) into tasks of `step` events; with `punctuate`, the one holding `events` flags it."""
    return [
        EventRange(lo, min(lo + step, end), punctuate and lo <= events < min(lo + step, end))
        for lo in range(start, end, step)
    ]


def split_step(step: int, start: int, end: int, min_partitions: int, tasks: int = 0) -> int:
    """Offsets per task of the epoch [start, end): the epoch in the nearest whole number of even tasks of
    about `step` offsets, at least `min_partitions` of them, but none under a `SPLIT_FLOOR`-th of `step`;
    or, with `tasks`, in that many even tasks whatever they hold.

    Why the nearest number, not the ceiling: a Python source task costs ~0.1 s whatever it holds, so an
    epoch a little over `step` split into a full task and a sliver paid a second task's cost for a few
    thousand records. At a stable rate whose epochs sit near `step` that made a cliff: a policy whose
    epochs were slightly longer (the routed plan's) crossed it, paid the extra task, and so kept its
    epochs longer (measured: Q5 at 102,300 events/s, 1.19 s epochs of two tasks against 1.00 s of one).
    Rounding keeps a task between two thirds and one and a half times `step`.

    Why `min_partitions`: with one task per epoch, a run with two VM cores reads on one of them until its
    epochs outgrow a task, and the second task then starts a Python worker in the middle of the burst
    that made them grow (measured: Q1 on two cores, the first burst epochs took 0.84 and 0.94 s against
    0.32 s before). The floor keeps a source whose records are sparse among the offsets (Q3's persons
    and auctions) at one task. The count is fixed for the run, never read from the capacity it has now:
    a re-run epoch must split its offsets exactly as the first attempt did (see `routed_step`).

    Why `tasks`: each task running at once reads and folds in Python workers of its own, and Spark
    starts a worker the first time more tasks run at once than workers sit idle. A drill's warm-up
    therefore runs its small epochs in as many tasks as its executors have slots, so that the first
    epoch big enough to split (the burst's) does not start them: measured on one VM core, Q5's first
    epoch split in two started two workers (0.7 s each) and took 3.2 s against 1.6 s for the next.
    """
    size = end - start
    if tasks > 0:
        return max(1, -(-size // tasks))
    if size <= 0:
        return max(1, step)
    nearest = max(1, int(size / step + 0.5))
    least = min(min_partitions, max(1, size * SPLIT_FLOOR // step))
    return -(-size // max(nearest, least))


def routed_step(offsets_per_task: int, route: str, segments: Sequence[Segment], start: int, end: int) -> int:
    """Offsets per task of a routed stream: enough that a task of either stream keeps the records of
    `offsets_per_task` offsets.

    Why: a Spark task of a Python source costs ~0.1 s whatever it holds (measured, ADR 0012), so at a
    high share the VM stream's tasks of heartbeats alone cost more than its records. The share comes
    from the routing log's segments, never the current plan: a re-run epoch must split its offsets
    exactly as the first attempt did, because the workers' sink files are named by task range.
    """
    covered = 0.0
    for i, seg in enumerate(segments):
        lo = max(seg.start, start)
        hi = min(segments[i + 1].start if i + 1 < len(segments) else end, end)
        covered += max(0, hi - lo) * expected_offloaded_share(seg.plan)
    share = covered / (end - start) if end > start else 0.0
    kept = share if route == OFFLOAD_ROUTE else 1.0 - share
    return max(1, int(offsets_per_task / max(kept, 1.0 / MAX_TASK_STRETCH)))


def read_range(options: SourceOptions, partition: EventRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of `options.entity` for one partition (imported lazily: runs on the workers)."""
    from core.nexmark.generator import generate

    batch = generate(options.generator_config(), options.entity, partition.start, partition.end)
    if batch.num_rows:
        yield batch
    if partition.punctuate:
        yield end_of_stream_batch(options.entity)


def end_of_stream_batch(entity: str) -> pa.RecordBatch:
    """The punctuation row: date_time = END_OF_STREAM_TIME_US, every other column null."""
    from core.file_schema import FileSchema

    return FileSchema.nexmark(entity).end_of_stream()


class NexmarkBatchReader(DataSourceReader):
    """All `events` events of the entity, without the punctuation (a batch query needs no watermark)."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        opts = self.options
        return event_ranges(0, opts.events, opts.offsets_per_task, opts.events, punctuate=False)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventRange)
        return read_range(self.options, partition)


class NexmarkStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches over the event index, optionally released at the schedule's wall-clock pace."""

    def __init__(self, options: SourceOptions) -> None:
        self.options = options
        self.pace_origin = options.pace_origin if options.pace_origin is not None else time.time()
        self._latest = 0  # highest offset handed out so far, so pacing never moves backwards
        self._target: int | None = None  # Trigger.AvailableNow's fixed end, if any
        self._agreed: str | None = None  # the routed streams' last decision this stream took

    def _offset(self, event: int) -> dict:
        """An offset; a stream whose rows the agent writes to the sink says so, for the readers that
        decide which of those rows committed (core/direct_sink.py)."""
        route = self.options.route
        if route is not None and route.direct_sink:
            return {"event": event, DIRECT_SINK_TAG: self.options.entity}
        return {"event": event}

    def initialOffset(self) -> dict:
        return self._offset(0)

    def released(self) -> int:
        """Offsets available now: all of them unpaced; paced, events due by the wall clock (+ punctuation)."""
        opts = self.options
        if opts.pace == "none":
            return opts.end_offset
        due = opts.schedule.events_by(time.time() - self.pace_origin)
        return opts.end_offset if due >= opts.events else due

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End of the next micro-batch: at most max_events_per_batch past `start`, and only what is due.

        `max_events_per_batch` applies even under ReadAllAvailable: it is this source's notion of a
        micro-batch size (an input rate), not an admission-control option Spark should override.
        """
        first = int(start["event"])
        end = min(
            self.options.end_offset,
            first + self._batch_cap(),
            max(self.released(), self._latest),
        )
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxRows):
            end = min(end, first + limit.max_rows)  # rows <= events, so this respects the row cap
        end = max(end, first)
        if self.options.route is not None:
            from router.routing_log import RoutingLog

            log = RoutingLog(self.options.route.offload_dir, ROUTING_RESERVE)
            end, self._agreed = log.agreed_end(first, end, self._agreed)
        self._latest = max(self._latest, end)
        return self._offset(end)

    def _batch_cap(self) -> int:
        """The most offsets one epoch covers: max_events_per_batch, scaled with the run's capacity now."""
        from core.spark.admission import batch_cap, read_vm_scale

        route = self.options.route
        scale = 1.0
        if route is not None:
            from core.offload_plan import share_scale
            from router.routing_log import read_current_plan

            scale = share_scale(read_current_plan(route.offload_dir).share)
        vm_scale = read_vm_scale(self.options.capacity_file)
        return batch_cap(self.options.max_events_per_batch, vm_scale, scale)

    def reportLatestOffset(self) -> dict:
        return self._offset(max(self.released(), self._latest))

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = max(self.released(), self._latest)

    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        opts = self.options
        lo, hi = int(start["event"]), int(end["event"])
        if opts.route is None:
            step = split_step(opts.offsets_per_task, lo, hi, opts.min_partitions, opts.tasks)
            return event_ranges(lo, hi, step, opts.events, punctuate=True)
        from router.routing_log import RoutingLog, covering, read_current_plan

        log = RoutingLog(opts.route.offload_dir, ROUTING_RESERVE)
        segments = log.plan_range(lo, hi, read_current_plan(opts.route.offload_dir))
        if opts.route.route == OFFLOAD_ROUTE and not any(seg.plan.offloads for seg in segments):
            return []  # an inactive router's workers' stream costs the epoch no task (docs/adr/0042)
        step = routed_step(opts.offsets_per_task, opts.route.route, segments, lo, hi)
        step = split_step(step, lo, hi, opts.min_partitions, opts.tasks)
        ranges = event_ranges(lo, hi, step, opts.events, punctuate=True)
        return [replace(r, segments=covering(segments, r.start, r.end)) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, EventRange)
        opts = self.options
        if opts.route is None:
            return read_range(opts, partition)
        from core.spark.task_attempt import task_attempt
        from router.source_router import read_routed

        return read_routed(
            opts.generator_config(),
            opts.entity,
            opts.route,
            partition.start,
            partition.end,
            partition.punctuate,
            partition.segments,
            attempt=task_attempt(),
        )

    def commit(self, end: dict) -> None:
        """Nothing to release: every range can be regenerated from its offsets."""


class NexmarkDataSource(DataSource):
    """`spark.read(Stream).format("nexmark")`: see the module docstring for the options."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.parsed = SourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str | StructType:
        if self.parsed.route is None:
            return spark_ddl(self.parsed.entity)
        from pyspark.sql.pandas.types import from_arrow_schema

        from core.nexmark.schema import schema_for
        from router.source_router import output_schema

        return from_arrow_schema(output_schema(schema_for(self.parsed.entity), self.parsed.route))

    def reader(self, schema: StructType) -> DataSourceReader:
        return NexmarkBatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return NexmarkStreamReader(self.parsed)


def register(spark: SparkSession) -> None:
    """Make `format("nexmark")` available in `spark` (idempotent)."""
    spark.dataSource.register(NexmarkDataSource)


def _integer(opts: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    text = opts.get(name)
    if text is None:
        return default
    try:
        value = int(text.strip())
    except ValueError:
        raise ConfigError(
            f"nexmark option {name}={text!r} is not an integer",
            hint=f'pass .option("{name}", <whole number >= {minimum}>)',
        ) from None
    if value < minimum:
        raise ConfigError(
            f"nexmark option {name}={value} is below {minimum}",
            hint=f'pass .option("{name}", <whole number >= {minimum}>)',
        )
    return value


def _real(text: str, name: str) -> float:
    try:
        return float(text.strip())
    except ValueError:
        raise ConfigError(
            f"nexmark option {name}={text!r} is not a number",
            hint=f'pass .option("{name}", <unix seconds, e.g. time.time()>)',
        ) from None

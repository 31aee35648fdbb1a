"""The "kinesis" PySpark data source: the records of one source read from a Kinesis stream, a NEXMark
entity's (from a stream of all three, tagged by "type") or those of a user's source (core/job.py).

Why: a broker is how real inputs arrive; the file source (core/spark/file_source.py) is the model,
and this source mirrors it (validation, dead letters, the end-of-stream punctuation) so the runner
and the lowering treat both alike. The record layout and every Kinesis call live in core/kinesis.py.

Offsets (ADR 0038) are `{"stream", "source", "shards": {shard: {"seq", "time", "ended", "n"}},
"done"}`: per shard, the sequence number of the last record a micro-batch includes (None: none yet),
the event time of that record, whether the shard's end-of-stream marker has been read, and how many
records the shard holds up to there; `done` once every shard's has. `latestOffset` looks ahead in
every shard and fixes each batch's end sequence numbers in the end offset; a partition reads one
shard from after its start sequence number up to and including its end one. A batch replayed from
Spark's checkpoint therefore reads exactly the same records, which with the Parquet sink's commit
log makes the output exactly-once. The ends are cut at a common event-time horizon (core/kinesis.py
`next_shards`) so no record arrives behind the watermark of an earlier batch.

Bounded reads (the default) punctuate like the file source: the batch in which the last shard's
marker is read adds the end-of-stream row, and the run ends. `bounded=false` ignores the markers
and never punctuates (a run then ends only when stopped).

Records: one JSON object each, validated as a line of a file (core/spark/input_validation.py
`parse_record`); a bad one goes to DEAD_LETTER/<source>/<shard>-<end sequence number>.jsonl (replaced
atomically: a replay rewrites it), as `{"stream", "shard", "sequence", "reason", "record"}`. In a
NEXMark stream a record whose "type" is no entity is a dead letter of every entity's read.

Routed reads (ADR 0050): as with the file source, a query's source is read twice, the VM's share
and the workers'. Each shard of a source has its own routing log under
OFFLOAD_DIR/kinesis/<source>/<shard>/, in units of the shard's records: the record with ordinal i
(counted by the offsets' `n`) of the shard numbered k is unit `k << 40 | i`, the same for both reads,
which cut their batches apart. A plan's record share hashes that unit, and a keyed stage's input
goes by its key group.

Options (all strings): stream (required), endpoint_url, region (us-east-1), entity or schema (one
of them, as for the file source), dead_letter (required), bounded ("true"), max_records_per_shard
(10000: the most records of one shard a micro-batch reads), and a routed read's options (route,
offload_dir, ...: router/source_router.py `RouteOptions`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceStreamReader, InputPartition

from core.direct_sink import DIRECT_SINK_TAG
from core.errors import ConfigError
from core.file_schema import FileSchema
from core.kinesis import GET_LIMIT, TYPE_KEY, KinesisEndpoint
from core.nexmark.schema import ENTITIES
from router.source_router import RouteOptions

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from router.routing_log import Segment

SOURCE_NAME = "kinesis"
UNTYPED = "no NEXMark type"


@dataclass(frozen=True)
class KinesisSourceOptions:
    """The parsed, validated options; parsing happens once, when Spark instantiates the source."""

    endpoint: KinesisEndpoint
    source: FileSchema
    dead_letter: str
    bounded: bool = True
    max_records_per_shard: int = GET_LIMIT
    route: RouteOptions | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> KinesisSourceOptions:
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if not opts.get("stream", "").strip():
            raise ConfigError("the kinesis source needs a stream option", hint='add .option("stream", NAME)')
        if ("entity" in opts) == ("schema" in opts):
            raise ConfigError(
                "the kinesis source needs an entity or a schema option (one of them)",
                hint='add .option("entity", "person" | "auction" | "bid"), or a user source\'s '
                '.option("schema", FileSchema.to_option())',
            )
        if not opts.get("dead_letter", "").strip():
            raise ConfigError(
                "the kinesis source needs a dead_letter option", hint='add .option("dead_letter", DIR)'
            )
        bounded = opts.get("bounded", "true").strip().lower()
        if bounded not in ("true", "false"):
            raise ConfigError(
                f"kinesis option bounded={opts['bounded']!r} is not true or false",
                hint='"true" ends at the producer\'s end-of-stream markers, "false" reads until stopped',
            )
        text = opts.get("max_records_per_shard", str(GET_LIMIT)).strip()
        cap = int(text) if text.isdigit() else 0
        if cap < 1:
            raise ConfigError(
                f"kinesis option max_records_per_shard={text!r} is not a positive integer",
                hint='pass .option("max_records_per_shard", <whole number >= 1>)',
            )
        source = (
            FileSchema.nexmark(opts["entity"].strip().lower())
            if "entity" in opts
            else FileSchema.from_option(opts["schema"])
        )
        return cls(
            endpoint=KinesisEndpoint(
                opts["stream"].strip(),
                opts.get("endpoint_url", "").strip() or None,
                opts.get("region", "").strip() or "us-east-1",
            ),
            source=source,
            dead_letter=str(Path(opts["dead_letter"].strip()).absolute()),
            bounded=bounded == "true",
            max_records_per_shard=cap,
            route=RouteOptions.parse(opts),
        )


@dataclass(frozen=True)
class ShardRange(InputPartition):
    """One Spark task: the records of `shard` after `after` up to and including `until` (none if
    `until` is None), then the end-of-stream row if `punctuate`.

    A routed stream's range also carries the ordinal of its first record in the shard (`first`), how
    many records it spans (`count`, markers and dead letters included) and the routing log's
    segments that route them (ADR 0050)."""

    shard: str | None
    after: str | None
    until: str | None
    punctuate: bool = False
    first: int = 0
    count: int = 0
    segments: tuple[Segment, ...] = ()


def valid_records(options: KinesisSourceOptions, part: ShardRange) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """(position in the range, row) of each valid record of one shard range, in order; the position
    counts every record, markers and dead letters too, as the offsets' `n` does. The rest go to the
    range's dead-letter file once the range is read."""
    from core.kinesis import is_end_marker, records_between
    from core.spark.input_validation import RecordError, parse_record, write_dead_letters

    source, endpoint = options.source, options.endpoint
    if part.shard is None or part.until is None:
        return
    letters: list[dict] = []
    client = endpoint.client()
    for position, record in enumerate(records_between(client, endpoint, part.shard, part.after, part.until)):
        data = record["Data"]
        if is_end_marker(data):
            continue
        try:
            if source.strict:  # a NEXMark stream: keep this entity's records
                kind = _kind(data)
                if kind != source.name:
                    if kind not in ENTITIES:
                        raise RecordError(f"{UNTYPED}: {TYPE_KEY}={kind!r}")
                    continue
            row = parse_record(data, source)
        except RecordError as err:
            letters.append(
                {
                    "stream": endpoint.stream,
                    "shard": part.shard,
                    "sequence": record["SequenceNumber"],
                    "reason": err.reason,
                    "record": data.decode("utf-8", errors="replace"),
                }
            )
            continue
        yield position, row
    write_dead_letters(Path(options.dead_letter) / source.name / f"{part.shard}-{part.until}.jsonl", letters)


def read_range(options: KinesisSourceOptions, part: ShardRange) -> Iterator[pa.RecordBatch]:
    """The valid records of one shard range as Arrow batches; the rest to its dead-letter file."""
    from core.spark.input_validation import BATCH_ROWS

    rows: list[tuple[Any, ...]] = []
    for _, row in valid_records(options, part):
        rows.append(row)
        if len(rows) >= BATCH_ROWS:
            yield _batch(options.source, rows)
            rows = []
    if rows:
        yield _batch(options.source, rows)
    if part.punctuate:
        yield options.source.end_of_stream()


def read_routed(options: KinesisSourceOptions, part: ShardRange) -> Iterator[pa.RecordBatch]:
    """The batches of one routed shard range (router/source_router.py `route_records`): record at
    position i of a range starting at ordinal `first` is unit `shard_units(shard, first + i, 1)`; then
    at the end of a bounded stream the punctuation's heartbeat."""
    import numpy as np
    import pyarrow as pa

    from core.kinesis import shard_units
    from core.spark.task_attempt import task_attempt
    from router.source_router import COUNTS, end_of_stream, route_records

    route, source = options.route, options.source
    assert route is not None
    if part.shard is not None and part.until is not None:
        positions: list[int] = []
        rows: list[tuple[Any, ...]] = []
        for position, row in valid_records(options, part):
            positions.append(position)
            rows.append(row)
        table = pa.Table.from_batches([_batch(source, rows)]) if rows else source.arrow.empty_table()
        units = shard_units(part.shard, part.first, part.count)
        ids = units.start + np.asarray(positions, dtype=np.int64)
        counts = kinesis_routing_dir(route.offload_dir, source.name, part.shard) / COUNTS
        span = (units.start, units.stop)
        yield from route_records(route, source, table, ids, span, part.segments, counts, task_attempt())
    if part.punctuate:
        yield end_of_stream(route, source)


def _kind(data: bytes) -> Any:
    try:
        obj = json.loads(data)
    except ValueError:
        return None  # parse_record says why, if the record reaches it
    return obj.get(TYPE_KEY) if isinstance(obj, dict) else None


def _batch(source: FileSchema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    from core.spark.input_validation import _to_batch

    return _to_batch(source, rows)


class KinesisStreamReader(DataSourceStreamReader):
    """Micro-batches of every shard, each cut at the end sequence numbers its end offset records."""

    def __init__(self, options: KinesisSourceOptions) -> None:
        self.options = options
        self._client: Any = None

    @property
    def client(self) -> Any:
        if self._client is None:
            self._client = self.options.endpoint.client()
        return self._client

    def _offset(self, shards: dict[str, dict]) -> dict:
        done = bool(shards) and self.options.bounded and all(v["ended"] for v in shards.values())
        offset = {
            "stream": self.options.endpoint.stream,
            "source": self.options.source.name,
            "shards": dict(sorted(shards.items())),
            "done": done,
        }
        if self.options.route is not None and self.options.route.direct_sink:
            offset[DIRECT_SINK_TAG] = self.options.source.name  # core/direct_sink.py counts its chunks by it
        return offset

    def initialOffset(self) -> dict:
        from core.kinesis import shard_ids, start_position

        shards = shard_ids(self.client, self.options.endpoint)
        return self._offset({s: start_position() for s in shards})

    def latestOffset(self, start: dict, limit: Any = None) -> dict:
        """Look ahead in every shard from `start` and cut the next batch (core/kinesis.py `next_shards`)."""
        from core.kinesis import Seen, next_shards, scan, shard_ids, start_position

        if start.get("done"):
            return start
        opts = self.options
        shards = dict(start["shards"])
        for s in shard_ids(self.client, opts.endpoint):  # shards added since (a reshard) start empty
            shards.setdefault(s, start_position())
        ahead: dict[str, list[Seen]] = {}
        for s, v in shards.items():
            if not v["ended"]:
                ahead[s] = scan(
                    self.client,
                    opts.endpoint,
                    s,
                    v["seq"],
                    opts.max_records_per_shard,
                    opts.source.event_time,
                    bounded=opts.bounded,  # unbounded, markers are read past, never ended on
                )
        return self._offset(next_shards(shards, ahead))

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        parts: list[InputPartition] = []
        first = start.get("shards", {})
        for s, v in end["shards"].items():
            before = first.get(s, {})
            if v["seq"] is not None and v["seq"] != before.get("seq"):
                parts.append(self._range(s, before, v))
        if end.get("done") and not start.get("done"):
            parts.append(ShardRange(None, None, None, punctuate=True))
        return parts

    def _range(self, shard: str, before: dict, after: dict) -> ShardRange:
        """The task over `shard` from position `before` to `after`; routed, with the plans of its
        records from the shard's routing log (a replayed batch gets the plans its first attempt got)."""
        plain = ShardRange(shard, before.get("seq"), after["seq"])
        route = self.options.route
        if route is None:
            return plain
        from core.kinesis import shard_units
        from router.routing_log import RoutingLog, read_current_plan

        first = int(before.get("n", 0))
        units = shard_units(shard, first, int(after["n"]) - first)
        log = RoutingLog(kinesis_routing_dir(route.offload_dir, self.options.source.name, shard))
        segments = log.plan_range(units.start, units.stop, read_current_plan(route.offload_dir))
        return replace(plain, first=first, count=len(units), segments=segments)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if not isinstance(partition, ShardRange):
            return iter(())
        if self.options.route is not None:
            return read_routed(self.options, partition)
        return read_range(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: records stay in the stream (for its retention) so a batch can replay."""


class KinesisDataSource(DataSource):
    """`spark.readStream.format("kinesis")`: see the module docstring for the options."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.parsed = KinesisSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str | StructType:
        if self.parsed.route is None:
            return self.parsed.source.spark_ddl
        from pyspark.sql.pandas.types import from_arrow_schema

        from router.source_router import output_schema

        return from_arrow_schema(output_schema(self.parsed.source.arrow, self.parsed.route))

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return KinesisStreamReader(self.parsed)


def kinesis_routing_dir(offload_dir: Path, source: str, shard: str) -> Path:
    """Where the routing log of one shard of a source (in units of its records) and its tasks'
    counts live."""
    return offload_dir / "kinesis" / source / shard


def register(spark: SparkSession) -> None:
    """Make `format("kinesis")` available in `spark` (idempotent)."""
    spark.dataSource.register(KinesisDataSource)

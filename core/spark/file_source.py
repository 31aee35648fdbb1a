"""The "nexmark-files" PySpark data source: the records of one source read from JSON-lines (or Parquet)
files, a NEXMark entity's or those of a source of a user's job (core/job.py) with its own schema.

Why a second source: real inputs arrive as files (or from a broker) and are not trustworthy, unlike
the generator of core/spark/source.py. One malformed or schema-violating line must not fail the
query, and must not vanish silently either: it goes to a dead-letter output with a reason, and the
query keeps running. The source mirrors the "nexmark" source (offsets, Arrow batches, the
end-of-stream punctuation) so the runner and the lowering treat both alike.

Layout: `PATH/<source>/*.jsonl`, one JSON object per line with the source's columns (a NEXMark
entity's: docs/queries.md, "Events"). Timestamps are ISO-8601 strings with a timezone
("2026-01-01T00:00:00.5Z", "...+02:00"; digits past the microsecond are truncated) or integer epoch
microseconds. Names starting
with "." or "_" are skipped, so a writer can write `.name.tmp` and rename it into place: a file must be
complete once it has its `.jsonl` name. Blank lines are ignored; keys that are not columns are ignored.
A user's source may be Parquet instead (`FileSchema.format`): `PATH/<source>/*.parquet`, listed by
the same rules, read by core/spark/parquet_read.py.

Each line (or Parquet row) is validated on its own and a bad one goes to a dead-letter file with the
reason, as core/spark/input_validation.py says (the contract, the dead-letter layout, why replays are safe).

Offsets are `{"files": k, "source": name}`: the first k files, sorted by name, have been consumed.
Bounded mode (default) fixes the file list when the stream reader starts; position `len(files)` (one
past the last file) is the END-OF-STREAM punctuation, a partition of its own that yields the same row as the
"nexmark" source (the event time at END_OF_STREAM_TIME_US, other columns null) so the watermark closes
every window and the run ends. Unbounded mode keeps listing the directory and never punctuates. New
files must sort after the ones already consumed (e.g. part-00007 after part-00006) and consumed files
must stay in place: a restarted query maps its checkpointed k back onto the sorted listing.

Options (all strings): path (required; also `.load(path)`), entity (a NEXMark entity) or schema (a
user's source: `FileSchema.to_option`), dead_letter (default PATH/_dead_letter), bounded ("true" |
"false", default "true"), max_files_per_batch (64), and a routed read's options (route, offload_dir,
...: router/source_router.py `RouteOptions`).

Routed reads (ADR 0037): as with the generator's source, a query's source is read twice, the VM's
share and the workers'. Each source has its own routing log, in units of its files, under
OFFLOAD_DIR/files/<source>/: a file is routed by one plan, fixed at its first planning. Within it,
record `row` of file `i` is numbered `i << 32 | row`, so a plan's record share hashes it as the
generator's share hashes an event's offset, and a keyed stage's input goes by its key group. Both
reads validate the same file and write the same dead letters (replaced atomically, identical either
way). The VM's read notes each file's valid and routed records (router/source_router.py
`routed_counts`), which the run's summary adds up.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxFiles, SupportsTriggerAvailableNow

from core.direct_sink import DIRECT_SINK_TAG
from core.errors import ConfigError, InputError
from core.file_schema import FileSchema
from core.nexmark.schema import check_entity
from core.spark.input_validation import read_file
from router.source_router import RouteOptions

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

    from router.routing_log import Segment

SOURCE_NAME = "nexmark-files"
DEFAULT_MAX_FILES_PER_BATCH = 64
DEAD_LETTER_DEFAULT_DIR = "_dead_letter"


# ---------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class FileSourceOptions:
    """The parsed, validated options; parsing happens once, when Spark instantiates the source."""

    path: str
    source: FileSchema
    dead_letter: str
    bounded: bool = True
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH
    route: RouteOptions | None = None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FileSourceOptions:
        """Read the string options of `spark.read(Stream).format("nexmark-files").option(...)`."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if not opts.get("path", "").strip():
            raise ConfigError(
                "the nexmark-files source needs a path option",
                hint='add .option("path", DIR) or .load(DIR); DIR holds person/, auction/, bid/ with *.jsonl',
            )
        if ("entity" in opts) == ("schema" in opts):
            raise ConfigError(
                "the nexmark-files source needs an entity or a schema option (one of them)",
                hint='add .option("entity", "person" | "auction" | "bid"), or a user source\'s '
                '.option("schema", FileSchema.to_option())',
            )
        path = opts["path"].strip()
        bounded = opts.get("bounded", "true").strip().lower()
        if bounded not in ("true", "false"):
            raise ConfigError(
                f"nexmark-files option bounded={opts['bounded']!r} is not true or false",
                hint='pass .option("bounded", "true") to end after the files present at start, '
                '"false" to follow the directory',
            )
        max_files = opts.get("max_files_per_batch", str(DEFAULT_MAX_FILES_PER_BATCH)).strip()
        try:
            max_files_per_batch = int(max_files)
        except ValueError:
            max_files_per_batch = 0
        if max_files_per_batch < 1:
            raise ConfigError(
                f"nexmark-files option max_files_per_batch={max_files!r} is not a positive integer",
                hint='pass .option("max_files_per_batch", <whole number >= 1>)',
            )
        dead_letter = opts.get("dead_letter", "").strip() or str(Path(path) / DEAD_LETTER_DEFAULT_DIR)
        dead_letter = str(Path(dead_letter).absolute())  # the same place for every worker
        source = (
            FileSchema.nexmark(opts["entity"].strip().lower())
            if "entity" in opts
            else FileSchema.from_option(opts["schema"])
        )
        return cls(
            path=path,
            source=source,
            dead_letter=dead_letter,
            bounded=bounded == "true",
            max_files_per_batch=max_files_per_batch,
            route=RouteOptions.parse(opts),
        )

    @property
    def entity(self) -> str:
        """The source's name: a NEXMark entity, or a source of a user's job."""
        return self.source.name

    @property
    def entity_dir(self) -> Path:
        return Path(self.path) / self.entity


def list_files(entity_dir: Path, suffix: str) -> list[str]:
    """The complete files of `entity_dir` (their names end in `suffix`, the source's `FileSchema.suffix`,
    and start with neither "." nor "_"), sorted by name (absolute paths); [] if it is missing."""
    if not entity_dir.is_dir():
        return []
    names = sorted(
        p.name
        for p in entity_dir.iterdir()
        if p.name.endswith(suffix) and not p.name.startswith((".", "_")) and p.is_file()
    )
    return [str(entity_dir.absolute() / name) for name in names]


def _require_dir(options: FileSourceOptions) -> None:
    """A bounded read of a missing directory is a typo, not an empty stream: say so before starting."""
    if options.bounded and not options.entity_dir.is_dir():
        raise InputError(
            f"no {options.entity} directory at {options.entity_dir}",
            hint=f"point path at a directory with {options.entity}/ holding *{options.source.suffix} files"
            + ("; core.nexmark.jsonl.write_jsonl_events writes that layout" if options.source.strict else ""),
        )


# ---------------------------------------------------------------------------------------------
# Reading a partition


@dataclass(frozen=True)
class FilePartition(InputPartition):
    """One Spark task: one input file, or (path None, punctuate True) the end-of-stream row alone.

    A routed stream's partition also carries the file's position in the listing (`index`) and the
    routing log's segment that routes it."""

    path: str | None
    punctuate: bool = False
    index: int = -1
    segments: tuple[Segment, ...] = ()


def read_partition(options: FileSourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one partition; anything but a FilePartition (Spark's placeholder) is empty."""
    if not isinstance(partition, FilePartition):
        return
    if partition.path is not None:
        yield from read_file(partition.path, options.source, options.dead_letter)
    if partition.punctuate:
        yield options.source.end_of_stream()


def source_routing_dir(offload_dir: Path, source: str) -> Path:
    """Where a source's routing log (in units of its files) and its files' counts live."""
    return offload_dir / "files" / source


def read_routed(options: FileSourceOptions, partition: FilePartition) -> Iterator[pa.RecordBatch]:
    """The batches of one routed file task (router/source_router.py `route_records`), then at the end
    of a bounded stream the punctuation's heartbeat."""
    from core.spark.task_attempt import task_attempt
    from router.routing_log import Segment
    from router.source_router import COUNTS, end_of_stream, route_records

    route, source = options.route, options.source
    assert route is not None
    if partition.path is not None:
        table = pa.Table.from_batches(
            list(read_file(partition.path, source, options.dead_letter)), schema=source.arrow
        )
        ids = (np.int64(partition.index) << 32) | np.arange(table.num_rows, dtype=np.int64)
        # A file is one task of one plan: its segment routes every row of it, whatever the rows' ids.
        plan = tuple(Segment(0, s.plan) for s in partition.segments[-1:])
        counts = source_routing_dir(route.offload_dir, source.name) / COUNTS
        span = (partition.index, partition.index + 1)
        yield from route_records(route, source, table, ids, span, plan, counts, task_attempt())
    if partition.punctuate:
        yield end_of_stream(route, source)


# ---------------------------------------------------------------------------------------------
# Readers


class FileBatchReader(DataSourceReader):
    """Every file present when the query is planned, one partition each, without the punctuation."""

    def __init__(self, options: FileSourceOptions) -> None:
        _require_dir(options)
        self.options = options
        self.files = list_files(options.entity_dir, options.source.suffix)

    def partitions(self) -> list[InputPartition]:
        return [FilePartition(path) for path in self.files]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)


class FileStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Micro-batches of whole files; bounded, the punctuation follows the last file."""

    def __init__(self, options: FileSourceOptions) -> None:
        _require_dir(options)
        self.options = options
        # Offset k means the first k entries of this list. Listed once here (a restart rebuilds it from
        # the sorted listing); in unbounded mode later arrivals are appended in name order, so a file
        # that sorts before consumed ones is still read exactly once in this process.
        self.files: list[str] = list_files(options.entity_dir, options.source.suffix)
        self._known = set(self.files)
        self._target: int | None = None  # Trigger.AvailableNow's fixed end, if any

    def _refresh(self) -> None:
        if self.options.bounded:
            return
        new = [
            f for f in list_files(self.options.entity_dir, self.options.source.suffix) if f not in self._known
        ]
        self.files.extend(new)
        self._known.update(new)

    def available(self) -> int:
        """Offsets available now: the files listed so far, plus the punctuation when bounded."""
        self._refresh()
        return len(self.files) + (1 if self.options.bounded else 0)

    def initialOffset(self) -> dict:
        return self._offset(0)

    def _offset(self, files: int) -> dict:
        """`{"files": k, "source": name}`: the name lets a reader of the progress (the live policy's
        backlog) tell the sources apart; reading an offset needs only "files"."""
        offset: dict = {"files": files, "source": self.options.entity}
        if self.options.route is not None and self.options.route.direct_sink:
            offset[DIRECT_SINK_TAG] = self.options.entity  # core/direct_sink.py counts its chunks by it
        return offset

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        """End of the next micro-batch: at most max_files_per_batch files past `start`.

        Like the "nexmark" source's max_events_per_batch, the cap applies even under ReadAllAvailable:
        it is this source's micro-batch size, not an admission-control option Spark should override.
        """
        first = int(start["files"])
        end = min(self.available(), first + self.options.max_files_per_batch)
        if self._target is not None:
            end = min(end, self._target)
        if isinstance(limit, ReadMaxFiles):
            end = min(end, first + max(limit.max_files, 1))
        return self._offset(max(end, first))

    def reportLatestOffset(self) -> dict:
        return self._offset(self.available())

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self.available()

    def partitions(self, start: dict, end: dict) -> list[InputPartition]:
        lo, hi = int(start["files"]), int(end["files"])
        self._refresh()
        n = len(self.files)
        if hi > n + (1 if self.options.bounded else 0):
            raise InputError(
                f"the checkpoint says {hi} {self.options.entity} files were reached, "
                f"but {self.options.entity_dir} holds {n}",
                hint=f"consumed *{self.options.source.suffix} files must stay in place; restore them or "
                "start from a new checkpoint",
            )
        segments = self._plan(lo, hi)
        parts: list[InputPartition] = [
            FilePartition(self.files[i], index=i, segments=covering_file(segments, i))
            for i in range(lo, min(hi, n))
        ]
        if self.options.bounded and lo <= n < hi:
            parts.append(FilePartition(None, punctuate=True, index=n))
        return parts

    def _plan(self, lo: int, hi: int) -> tuple[Segment, ...]:
        """A routed stream's plans for files [lo, hi), from its source's routing log; () unrouted."""
        route = self.options.route
        if route is None or hi <= lo:
            return ()
        from router.routing_log import RoutingLog, read_current_plan

        log = RoutingLog(source_routing_dir(route.offload_dir, self.options.entity))
        return log.plan_range(lo, hi, read_current_plan(route.offload_dir))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if self.options.route is None or not isinstance(partition, FilePartition):
            return read_partition(self.options, partition)
        return read_routed(self.options, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: input files are left in place so any batch can be replayed."""


class NexmarkFileDataSource(DataSource):
    """`spark.read(Stream).format("nexmark-files")`: see the module docstring for the options."""

    def __init__(self, options: dict[str, Any]) -> None:
        super().__init__(options)
        self.parsed = FileSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return SOURCE_NAME

    def schema(self) -> str | StructType:
        if self.parsed.route is None:
            return self.parsed.source.spark_ddl
        from pyspark.sql.pandas.types import from_arrow_schema

        from router.source_router import output_schema

        return from_arrow_schema(output_schema(self.parsed.source.arrow, self.parsed.route))

    def reader(self, schema: StructType) -> DataSourceReader:
        return FileBatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FileStreamReader(self.parsed)


def covering_file(segments: Sequence[Segment], index: int) -> tuple[Segment, ...]:
    from router.routing_log import covering

    return covering(segments, index, index + 1) if segments else ()


def register(spark: SparkSession) -> None:
    """Make `format("nexmark-files")` available in `spark` (idempotent)."""
    spark.dataSource.register(NexmarkFileDataSource)


def require_entity_dirs(path: str | Path, sources: Sequence[FileSchema | str]) -> None:
    """Fail before a run starts if `path` lacks a directory a job reads (a NEXMark entity's name stands
    for its schema), with what to do about it.

    The stream readers check this too, but only once the streaming query runs, where the error would
    surface as a StreamingQueryException instead of a one-line InputError.
    """
    schemas = [s if isinstance(s, FileSchema) else FileSchema.nexmark(s) for s in sources]
    missing = {s.name: s.suffix for s in schemas if not (Path(path) / s.name).is_dir()}
    if missing:
        writer = (
            "; core.nexmark.jsonl.write_jsonl_events writes that layout"
            if all(s.strict for s in schemas)
            else ""
        )
        raise InputError(
            f"input {path} has no {', '.join(missing)} director{'y' if len(missing) == 1 else 'ies'}",
            hint=f"put {', '.join(f'{e}/*{suffix}' for e, suffix in missing.items())} under it{writer}",
        )


def bounded_end_offset(path: str | Path, entity: str) -> int:
    """The last offset of a bounded stream over `path`: its file count plus the punctuation position."""
    return len(list_files(Path(path) / check_entity(entity), FileSchema.nexmark(entity).suffix)) + 1

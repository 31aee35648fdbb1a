"""The "nexmark-files" PySpark data source: NEXMark events of one entity read from JSON-lines files.

Why a second source: real inputs arrive as files (or from a broker) and are not trustworthy, unlike
the generator of core/spark/source.py. One malformed or schema-violating line must not fail the
query, and must not vanish silently either: it goes to a dead-letter output with a reason, and the
query keeps running. The source mirrors the "nexmark" source (offsets, Arrow batches, the
end-of-stream punctuation) so the runner and the lowering treat both alike.

Layout: `PATH/<entity>/*.jsonl`, one JSON object per line with the entity's columns
(docs/queries.md, "Events"). Timestamps are ISO-8601 strings with a timezone ("2026-01-01T00:00:00.5Z",
"...+02:00"; digits past the microsecond are truncated) or integer epoch microseconds. Names starting
with "." or "_" are skipped, so a writer can write `.name.tmp` and rename it into place: a file must be
complete once it has its `.jsonl` name. Blank lines are ignored; keys that are not columns are ignored.

Validation (`parse_record`): every column must be present; int64 columns (ids, prices, category) must
be non-null whole numbers in [0, 2^63); timestamps must be non-null; string columns may be null.
Why this contract: numbers and times are what the queries compute on (join keys, windows, prices),
and a null there would silently drop out of a join or an aggregate; strings are only descriptive.
A date_time at or after END_OF_STREAM_TIME_US is rejected as well: it would advance the watermark
to the end of time, close every window early and turn all later events into dropped late data.

Dead letters: each partition (one input file) writes `dead_letter/<entity>/<file-stem>.jsonl`, one
object per rejected line, `{"file", "line", "reason", "record"}` (line numbers from 1, `record` the raw
text). The name depends only on the input file and the file is replaced atomically (temporary name +
rename), so a replayed partition (a task retry, a batch re-run after a restart) overwrites its dead
letters instead of duplicating them; a file without bad lines removes any stale dead-letter file.
The dead-letter directory must be visible to the executors (trivially so with a local master).

Offsets are `{"files": k}`: the first k files, sorted by name, have been consumed. Bounded mode
(default) fixes the file list when the stream reader starts; position `len(files)` (one past the last
file) is the END-OF-STREAM punctuation, a partition of its own that yields the same row as the
"nexmark" source (date_time = END_OF_STREAM_TIME_US, other columns null) so the watermark closes
every window and the run ends. Unbounded mode keeps listing the directory and never punctuates. New
files must sort after the ones already consumed (e.g. part-00007 after part-00006) and consumed files
must stay in place: a restarted query maps its checkpointed k back onto the sorted listing.

Options (all strings): path (required; also `.load(path)`), entity (required), dead_letter (default
PATH/_dead_letter), bounded ("true" | "false", default "true"), max_files_per_batch (64).
"""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxFiles, SupportsTriggerAvailableNow

from core.errors import ConfigError, InputError
from core.nexmark.schema import END_OF_STREAM_TIME_US, check_entity, schema_for, spark_ddl
from core.spark.source import end_of_stream_batch

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.types import StructType

SOURCE_NAME = "nexmark-files"
FILE_SUFFIX = ".jsonl"
DEFAULT_MAX_FILES_PER_BATCH = 64
DEAD_LETTER_DEFAULT_DIR = "_dead_letter"
BATCH_ROWS = 65_536
"""Valid rows per Arrow batch a partition yields: bounds a worker's memory on large files."""

_INT64_MAX = (1 << 63) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_EOS_TEXT = "2100-01-01T00:00:00Z"


# ---------------------------------------------------------------------------------------------
# Options


@dataclass(frozen=True)
class FileSourceOptions:
    """The parsed, validated options; parsing happens once, when Spark instantiates the source."""

    path: str
    entity: str
    dead_letter: str
    bounded: bool = True
    max_files_per_batch: int = DEFAULT_MAX_FILES_PER_BATCH

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> FileSourceOptions:
        """Read the string options of `spark.read(Stream).format("nexmark-files").option(...)`."""
        opts = {str(k).lower(): str(v) for k, v in options.items()}
        if not opts.get("path", "").strip():
            raise ConfigError(
                "the nexmark-files source needs a path option",
                hint='add .option("path", DIR) or .load(DIR); DIR holds person/, auction/, bid/ with *.jsonl',
            )
        if "entity" not in opts:
            raise ConfigError(
                "the nexmark-files source needs an entity option",
                hint='add .option("entity", "person" | "auction" | "bid")',
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
        return cls(
            path=path,
            entity=check_entity(opts["entity"].strip().lower()),
            dead_letter=dead_letter,
            bounded=bounded == "true",
            max_files_per_batch=max_files_per_batch,
        )

    @property
    def entity_dir(self) -> Path:
        return Path(self.path) / self.entity


def list_files(entity_dir: Path) -> list[str]:
    """The complete `*.jsonl` files of `entity_dir`, sorted by name (absolute paths); [] if it is missing."""
    if not entity_dir.is_dir():
        return []
    names = sorted(
        p.name
        for p in entity_dir.iterdir()
        if p.name.endswith(FILE_SUFFIX) and not p.name.startswith((".", "_")) and p.is_file()
    )
    return [str(entity_dir.absolute() / name) for name in names]


def _require_dir(options: FileSourceOptions) -> None:
    """A bounded read of a missing directory is a typo, not an empty stream: say so before starting."""
    if options.bounded and not options.entity_dir.is_dir():
        raise InputError(
            f"no {options.entity} directory at {options.entity_dir}",
            hint="point path at a directory with person/, auction/, bid/ holding *.jsonl files; "
            "core.nexmark.jsonl.write_jsonl_events writes that layout",
        )


# ---------------------------------------------------------------------------------------------
# Line validation


class RecordError(ValueError):
    """A line that cannot become a row; `reason` is what the dead letter records."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class _Column:
    name: str
    kind: str  # "int64" | "timestamp" | "string"
    nullable: bool
    before_eos: bool  # date_time only: must lie before the end-of-stream punctuation


@cache
def _columns(entity: str) -> tuple[_Column, ...]:
    """The validation rules of `entity`, derived from its Arrow schema so the two cannot drift."""
    rules = []
    for field in schema_for(entity):
        if field.type == pa.int64():
            kind = "int64"
        elif pa.types.is_timestamp(field.type):
            kind = "timestamp"
        elif field.type == pa.string():
            kind = "string"
        else:  # pragma: no cover - a new column type needs a rule here first
            raise TypeError(f"no validation rule for {entity}.{field.name}: {field.type}")
        nullable, before_eos = kind == "string", field.name == "date_time"
        rules.append(_Column(field.name, kind, nullable=nullable, before_eos=before_eos))
    return tuple(rules)


def _json_type(value: Any) -> str:
    """The JSON name of a decoded value's type, as a user sees it in the file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _int64(col: _Column, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise RecordError(f"field '{col.name}': expected int64, got {_json_type(value)}")
    if value < 0:
        raise RecordError(f"field '{col.name}': must be >= 0, got {value}")
    if value > _INT64_MAX:
        raise RecordError(f"field '{col.name}': {value} is out of the int64 range")
    return value


def _timestamp_us(col: _Column, value: Any) -> int:
    if isinstance(value, str):
        try:
            parsed = datetime.fromisoformat(value)
        except ValueError:
            raise RecordError(f"field '{col.name}': not an ISO-8601 timestamp: {value!r}") from None
        if parsed.tzinfo is None:
            raise RecordError(f"field '{col.name}': timestamp without a timezone: {value!r}")
        micros = (parsed - _EPOCH) // _ONE_US
    elif isinstance(value, int) and not isinstance(value, bool):
        if not -_INT64_MAX <= value <= _INT64_MAX:
            raise RecordError(f"field '{col.name}': {value} is out of the int64 microseconds range")
        micros = value
    else:
        raise RecordError(
            f"field '{col.name}': expected timestamp (ISO-8601 string or epoch microseconds), "
            f"got {_json_type(value)}"
        )
    if col.before_eos and micros >= END_OF_STREAM_TIME_US:
        raise RecordError(f"field '{col.name}': at or after the end-of-stream time {_EOS_TEXT}")
    return micros


def _string(col: _Column, value: Any) -> str:
    if not isinstance(value, str):
        raise RecordError(f"field '{col.name}': expected string, got {_json_type(value)}")
    return value


_CONVERT = {"int64": _int64, "timestamp": _timestamp_us, "string": _string}


def parse_record(line: str | bytes, entity: str) -> tuple[Any, ...]:
    """One JSON line as a tuple of `entity`'s column values, timestamps as UTC epoch microseconds.

    Raises RecordError with the first problem in column order, so a line always gets the same reason:
    "malformed json: ...", "missing field 'price'", "field 'price': expected int64, got string",
    "field 'date_time': must not be null", "field 'price': must be >= 0, got -5", ...
    """
    if isinstance(line, bytes):
        try:
            line = line.decode("utf-8")
        except UnicodeDecodeError as err:
            raise RecordError(f"malformed json: invalid utf-8 ({err.reason} at byte {err.start})") from None
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as err:
        raise RecordError(f"malformed json: {err}") from None
    except RecursionError:
        raise RecordError("malformed json: nested too deeply") from None
    if not isinstance(obj, dict):
        raise RecordError(f"malformed json: expected an object, got {_json_type(obj)}")
    values = []
    for col in _columns(entity):
        if col.name not in obj:
            raise RecordError(f"missing field '{col.name}'")
        value = obj[col.name]
        if value is None:
            if not col.nullable:
                raise RecordError(f"field '{col.name}': must not be null")
            values.append(None)
            continue
        values.append(_CONVERT[col.kind](col, value))
    return tuple(values)


def reason_kind(reason: str) -> str:
    """The stable part of a reason (before the first ':'), used to count dead letters by kind."""
    return reason.split(":", 1)[0].strip()


# ---------------------------------------------------------------------------------------------
# Reading a partition


@dataclass(frozen=True)
class FilePartition(InputPartition):
    """One Spark task: one input file, or (path None, punctuate True) the end-of-stream row alone."""

    path: str | None
    punctuate: bool = False


def dead_letter_file(dead_letter_dir: str | Path, entity: str, input_file: str | Path) -> Path:
    """Where the dead letters of `input_file` go: a function of the input file alone, for idempotency."""
    return Path(dead_letter_dir) / entity / (Path(input_file).stem + FILE_SUFFIX)


def write_dead_letters(target: Path, letters: Sequence[Mapping[str, Any]]) -> None:
    """Replace `target` with `letters` as JSON lines, atomically; remove it when there are none.

    A unique temporary name in the same directory, then os.replace: readers see the old or the new
    file, never a torn one, and two attempts of the same task (retry, speculation) cannot interleave.
    """
    if not letters:
        target.unlink(missing_ok=True)
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "w", encoding="utf-8") as out:
            for letter in letters:
                out.write(json.dumps(letter, ensure_ascii=False) + "\n")
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


def _to_batch(entity: str, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    schema = schema_for(entity)
    columns = [list(values) for values in zip(*rows, strict=True)]
    arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_file(
    input_file: str | Path, entity: str, dead_letter_dir: str | Path, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The valid rows of one JSONL file as Arrow batches of the entity schema; bad lines to dead letters.

    The dead-letter file is written once the whole file has been read (a partially consumed iterator
    writes none, since its letters would be incomplete); it is replaced, never appended to.
    """
    letters: list[dict[str, Any]] = []
    rows: list[tuple[Any, ...]] = []
    try:
        handle = open(input_file, "rb")  # noqa: SIM115 - closed by the with below; open errors are clearer
    except FileNotFoundError:
        raise InputError(
            f"input file {input_file} disappeared before it was read",
            hint="do not move or delete *.jsonl files under the source path while a query reads them",
        ) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\r\n")
            if number == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a UTF-8 byte-order mark some editors write
            if not line.strip():
                continue
            try:
                rows.append(parse_record(line, entity))
            except RecordError as err:
                letters.append(
                    {
                        "file": str(input_file),
                        "line": number,
                        "reason": err.reason,
                        "record": line.decode("utf-8", errors="replace"),
                    }
                )
                continue
            if len(rows) >= batch_rows:
                yield _to_batch(entity, rows)
                rows = []
    if rows:
        yield _to_batch(entity, rows)
    write_dead_letters(dead_letter_file(dead_letter_dir, entity, input_file), letters)


def read_partition(options: FileSourceOptions, partition: InputPartition) -> Iterator[pa.RecordBatch]:
    """Arrow batches of one partition; anything but a FilePartition (Spark's placeholder) is empty."""
    if not isinstance(partition, FilePartition):
        return
    if partition.path is not None:
        yield from read_file(partition.path, options.entity, options.dead_letter)
    if partition.punctuate:
        yield end_of_stream_batch(options.entity)


# ---------------------------------------------------------------------------------------------
# Readers


class FileBatchReader(DataSourceReader):
    """Every file present when the query is planned, one partition each, without the punctuation."""

    def __init__(self, options: FileSourceOptions) -> None:
        _require_dir(options)
        self.options = options
        self.files = list_files(options.entity_dir)

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
        self.files: list[str] = list_files(options.entity_dir)
        self._known = set(self.files)
        self._target: int | None = None  # Trigger.AvailableNow's fixed end, if any

    def _refresh(self) -> None:
        if self.options.bounded:
            return
        new = [f for f in list_files(self.options.entity_dir) if f not in self._known]
        self.files.extend(new)
        self._known.update(new)

    def available(self) -> int:
        """Offsets available now: the files listed so far, plus the punctuation when bounded."""
        self._refresh()
        return len(self.files) + (1 if self.options.bounded else 0)

    def initialOffset(self) -> dict:
        return {"files": 0}

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
        return {"files": max(end, first)}

    def reportLatestOffset(self) -> dict:
        return {"files": self.available()}

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
                hint="consumed *.jsonl files must stay in place; restore them or start from a new checkpoint",
            )
        parts: list[InputPartition] = [FilePartition(self.files[i]) for i in range(lo, min(hi, n))]
        if self.options.bounded and lo <= n < hi:
            parts.append(FilePartition(None, punctuate=True))
        return parts

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.options, partition)

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

    def schema(self) -> str:
        return spark_ddl(self.parsed.entity)

    def reader(self, schema: StructType) -> DataSourceReader:
        return FileBatchReader(self.parsed)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        return FileStreamReader(self.parsed)


def register(spark: SparkSession) -> None:
    """Make `format("nexmark-files")` available in `spark` (idempotent)."""
    spark.dataSource.register(NexmarkFileDataSource)


def require_entity_dirs(path: str | Path, entities: Sequence[str]) -> None:
    """Fail before a run starts if `path` lacks a directory a query reads, with what to do about it.

    The stream readers check this too, but only once the streaming query runs, where the error would
    surface as a StreamingQueryException instead of a one-line InputError.
    """
    missing = [e for e in entities if not (Path(path) / check_entity(e)).is_dir()]
    if missing:
        raise InputError(
            f"input {path} has no {', '.join(missing)} director{'y' if len(missing) == 1 else 'ies'}",
            hint=f"put {', '.join(f'{e}/*.jsonl' for e in missing)} under it; "
            "core.nexmark.jsonl.write_jsonl_events writes that layout",
        )


def bounded_end_offset(path: str | Path, entity: str) -> int:
    """The last offset of a bounded stream over `path`: its file count plus the punctuation position."""
    return len(list_files(Path(path) / check_entity(entity))) + 1


def dead_letter_summary(dead_letter_dir: str | Path) -> dict[str, Any]:
    """`{"count": n, "by_reason": {reason_kind: n}}` over every dead letter under `dead_letter_dir`.

    Counts lines of `<entity>/*.jsonl`, so temporary files of a write in progress are never counted;
    a missing directory means no dead letters.
    """
    kinds: Counter[str] = Counter()
    root = Path(dead_letter_dir)
    files = sorted(root.glob(f"*/*{FILE_SUFFIX}")) if root.is_dir() else []
    for path in files:
        if path.name.startswith("."):
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                if line.strip():
                    kinds[reason_kind(json.loads(line)["reason"])] += 1
    return {"count": sum(kinds.values()), "by_reason": dict(sorted(kinds.items()))}

"""One input file read defensively: valid lines (or Parquet rows) become Arrow rows, the others dead
letters.

Why apart from the Spark data source (core/spark/file_source.py): what makes a line a row, and where a
rejected line goes, is plain Python over one file; the source only decides which files a micro-batch
reads. This module imports no PySpark: Spark's Python workers run it, and tests need no session.

Validation (`parse_record`), against the source's `FileSchema` (core/file_schema.py): every column
must be present and of its type (int64 a whole number in int64's range, float64 any JSON number, bool
true or false, a timestamp an ISO-8601 string with a timezone or epoch microseconds, a string a
string). The event time must not be null. For a NEXMark entity, int64 columns (ids, prices,
category) must also be non-null and non-negative, and only strings may be null. Why: numbers and
times are what the queries compute on (join keys, windows, prices), and a null there would silently
drop out of a join or an aggregate. A user's source may hold nulls anywhere but in its event time. An
event time at or after END_OF_STREAM_TIME_US is rejected as well: it would advance the watermark to
the end of time, close every window early and turn all later events into dropped late data.

Dead letters: each partition (one input file) writes `dead_letter/<source>/<file-stem>.jsonl`, one
object per rejected line, `{"file", "line", "reason", "record"}` (line numbers from 1, `record` the raw
text). The name depends only on the input file and the file is replaced atomically (temporary name +
rename), so a replayed partition (a task retry, a batch re-run after a restart) overwrites its dead
letters instead of duplicating them; a file without bad lines removes any stale dead-letter file.
The dead-letter directory must be visible to the executors (trivially so with a local master).

A Parquet source's file (core/file_schema.py `format`) is read by `read_file` too, which dispatches
on the format, so that file_source.py has one entry point and both formats keep this contract:
core/spark/parquet_read.py says which of its rows are valid, and why the others or the whole file are
not; its letters are `{"file", "row", "reason", "record"}` (row from 1, or null for a file rejected
whole, with a null record), under the same name, so `dead_letter_summary` counts them alike.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa

from core import atomic_write
from core.errors import InputError
from core.file_schema import FileSchema
from core.nexmark.schema import END_OF_STREAM_TIME_US
from core.spark import parquet_read

Schema = FileSchema | str  # a NEXMark entity's name stands for its schema

FILE_SUFFIX = ".jsonl"
BATCH_ROWS = 65_536
"""Valid rows per Arrow batch a partition yields: bounds a worker's memory on large files."""

_INT64_MAX = (1 << 63) - 1
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_ONE_US = timedelta(microseconds=1)
_EOS_TEXT = "2100-01-01T00:00:00Z"


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
    kind: str  # a core.file_schema.KINDS name
    nullable: bool
    non_negative: bool
    before_eos: bool  # the event time: must lie before the end-of-stream punctuation


def _schema(schema: Schema) -> FileSchema:
    return schema if isinstance(schema, FileSchema) else _nexmark(schema)


@cache
def _nexmark(entity: str) -> FileSchema:
    """Built once per entity: a caller naming the entity asks again for every line."""
    return FileSchema.nexmark(entity)


@cache
def _columns(schema: FileSchema) -> tuple[_Column, ...]:
    """The validation rules of a source's columns, from its schema so the two cannot drift."""
    return tuple(
        _Column(c, k, schema.nullable(c, k), schema.non_negative(k), before_eos=c == schema.event_time)
        for c, k in schema.columns
    )


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
    if col.non_negative and value < 0:
        raise RecordError(f"field '{col.name}': must be >= 0, got {value}")
    if not -_INT64_MAX - 1 <= value <= _INT64_MAX:
        raise RecordError(f"field '{col.name}': {value} is out of the int64 range")
    return value


def _float64(col: _Column, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise RecordError(f"field '{col.name}': expected float64, got {_json_type(value)}")
    return float(value)


def _bool(col: _Column, value: Any) -> bool:
    if not isinstance(value, bool):
        raise RecordError(f"field '{col.name}': expected bool, got {_json_type(value)}")
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


_CONVERT = {
    "int64": _int64,
    "float64": _float64,
    "bool": _bool,
    "timestamp": _timestamp_us,
    "string": _string,
}


def parse_record(line: str | bytes, schema: Schema) -> tuple[Any, ...]:
    """One JSON line as a tuple of the source's column values, timestamps as UTC epoch microseconds.

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
    for col in _columns(_schema(schema)):
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
# Reading a file: rows and dead letters


def dead_letter_file(dead_letter_dir: str | Path, source: str, input_file: str | Path) -> Path:
    """Where the dead letters of `input_file` go: a function of the input file alone, for idempotency."""
    return Path(dead_letter_dir) / source / (Path(input_file).stem + FILE_SUFFIX)


def write_dead_letters(target: Path, letters: Sequence[Mapping[str, Any]]) -> None:
    """Replace `target` with `letters` as JSON lines, atomically; remove it when there are none.

    Two attempts of the same task (retry, speculation) each write the whole file; the last one wins.
    """
    if not letters:
        target.unlink(missing_ok=True)
        return
    atomic_write.write_text(
        target, "".join(json.dumps(letter, ensure_ascii=False) + "\n" for letter in letters)
    )


def _to_batch(source: FileSchema, rows: list[tuple[Any, ...]]) -> pa.RecordBatch:
    schema = source.arrow
    columns = [list(values) for values in zip(*rows, strict=True)]
    arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def read_file(
    input_file: str | Path, schema: Schema, dead_letter_dir: str | Path, batch_rows: int = BATCH_ROWS
) -> Iterator[pa.RecordBatch]:
    """The valid rows of one input file (JSON lines, or Parquet for a Parquet source) as Arrow batches of
    the source's schema; bad lines, rows or files to dead letters.

    The dead-letter file is written once the whole file has been read (a partially consumed iterator
    writes none, since its letters would be incomplete); it is replaced, never appended to.
    """
    source = _schema(schema)
    target = dead_letter_file(dead_letter_dir, source.name, input_file)
    if source.format == "parquet":
        try:
            table, letters = parquet_read.read_table(input_file, source)
        except FileNotFoundError:
            raise _disappeared(input_file, source) from None
        yield from (b for b in table.to_batches(max_chunksize=batch_rows) if b.num_rows)
        write_dead_letters(target, letters)
        return
    letters = []
    rows: list[tuple[Any, ...]] = []
    try:
        handle = open(input_file, "rb")  # noqa: SIM115 - closed by the with below; open errors are clearer
    except FileNotFoundError:
        raise _disappeared(input_file, source) from None
    with handle:
        for number, raw in enumerate(handle, start=1):
            line = raw.rstrip(b"\r\n")
            if number == 1 and line.startswith(b"\xef\xbb\xbf"):
                line = line[3:]  # a UTF-8 byte-order mark some editors write
            if not line.strip():
                continue
            try:
                rows.append(parse_record(line, source))
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
                yield _to_batch(source, rows)
                rows = []
    if rows:
        yield _to_batch(source, rows)
    write_dead_letters(target, letters)


def _disappeared(input_file: str | Path, source: FileSchema) -> InputError:
    return InputError(
        f"input file {input_file} disappeared before it was read",
        hint=f"do not move or delete *{source.suffix} files under the source path while a query reads them",
    )


def dead_letter_summary(dead_letter_dir: str | Path) -> dict[str, Any]:
    """`{"count": n, "by_reason": {reason_kind: n}}` over every dead letter under `dead_letter_dir`.

    Counts lines of `<source>/*.jsonl` (a Parquet source's letters too), so temporary files of a write
    in progress are never counted; a missing directory means no dead letters.
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

"""One Parquet input file read defensively: its rows typed as the source's schema, and the rows or the
whole file that cannot be, as dead letters.

Why apart from the JSON-lines validator (core/spark/input_validation.py): a Parquet file is typed
already and read by column, so its checks are on whole columns (vectorised), where a JSON line is
checked value by value. The dead letters are the same: `read_file` there dispatches on the source's
format and writes them for both, with one layout and one contract (replaced atomically, identical on
replay). This module only decides which rows are valid and why the others are not; it imports no
PySpark, and it reads only the file, so every read of a file (the VM's and the workers') gets the same
rows and the same letters.

Columns are selected by name (others in the file are ignored) and cast to their kind's Arrow type
(core/file_schema.py KINDS) with safe casts: int64 from any integer; float64 from any integer, float or
decimal; string from any string; bool from bool; timestamp from a timestamp (nanoseconds truncated to
microseconds, as JSON lines' extra digits are; one without a timezone is taken as UTC), a date, or an
integer of epoch microseconds (as JSON lines accept). A dictionary-encoded column counts as its
values; an all-null column as any type.

A file is dead-lettered whole, with the rest of the run going on, when it cannot be read as Parquet,
lacks a column or holds it twice, or holds a column of another type or with a value its type cannot
hold (an uint64 past int64's range): its letter has no row. Otherwise each row is checked as a JSON
line is, and a row that fails goes to a dead letter with its number (from 1, in the file's order), the
first problem in column order as its reason, worded as JSON lines word it ("field 'at': must not be
null", "field 'price': must be >= 0, got -3", an event time at or after the end-of-stream punctuation)
and the row's values as a JSON object; the rest of the file is read.
"""

from __future__ import annotations

import json
from datetime import date, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from core.file_schema import KINDS, FileSchema
from core.nexmark.schema import END_OF_STREAM_TIME_US

_EOS_TEXT = "2100-01-01T00:00:00Z"


class FileRejected(ValueError):
    """A whole file that cannot become rows; `reason` is what its dead letter records."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def read_table(path: str | Path, source: FileSchema) -> tuple[pa.Table, list[dict[str, Any]]]:
    """The valid rows of the Parquet file `path` as a table of `source`'s schema, and the dead letters
    of the others (`{"file", "row", "reason", "record"}`): one without a row for a rejected file.

    A file that has gone raises FileNotFoundError (the caller says what to do about it)."""
    try:
        table = _typed(path, source)
    except FileRejected as rejected:
        letter = {"file": str(path), "row": None, "reason": rejected.reason, "record": None}
        return source.arrow.empty_table(), [letter]
    reasons = _row_reasons(table, source)
    if not reasons:
        return table, []
    bad = np.zeros(table.num_rows, dtype=bool)
    bad[list(reasons)] = True
    letters = [
        {"file": str(path), "row": i + 1, "reason": reasons[i], "record": _record(table, i)}
        for i in sorted(reasons)
    ]
    return table.filter(pa.array(~bad)), letters


def count_rows(path: str | Path) -> int:
    """The rows a Parquet file holds, from its footer (no data read); 0 if it has gone or is not
    Parquet (a rejected file releases no records)."""
    try:
        with pq.ParquetFile(path) as parquet:
            return parquet.metadata.num_rows
    except (OSError, pa.ArrowException):
        return 0


# ---------------------------------------------------------------------------------------------
# The whole file


def _typed(path: str | Path, source: FileSchema) -> pa.Table:
    """The source's columns of the file, cast to their kinds; FileRejected names the first problem."""
    try:
        parquet = pq.ParquetFile(path)
    except FileNotFoundError:
        raise
    except (OSError, pa.ArrowException) as err:
        raise FileRejected(f"not a readable parquet file: {err}") from None
    with parquet:
        names = parquet.schema_arrow.names
        for column, _ in source.columns:
            if column not in names:
                raise FileRejected(f"missing column '{column}': the file has {', '.join(names) or 'none'}")
            if names.count(column) > 1:
                raise FileRejected(f"column '{column}': the file has {names.count(column)} of that name")
        try:
            read = parquet.read(columns=[c for c, _ in source.columns])
        except (OSError, pa.ArrowException) as err:
            raise FileRejected(f"not a readable parquet file: {err}") from None
    arrays = [_cast(column, kind, read.column(column)) for column, kind in source.columns]
    return pa.Table.from_arrays(arrays, schema=source.arrow)


def _family(kind: str, t: pa.DataType) -> bool:
    """Whether a column of Arrow type `t` may be read as `kind` (the module docstring's list)."""
    if pa.types.is_null(t):
        return True
    if kind == "int64":
        return pa.types.is_integer(t)
    if kind == "float64":
        return pa.types.is_integer(t) or pa.types.is_floating(t) or pa.types.is_decimal(t)
    if kind == "string":
        return pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t)
    if kind == "bool":
        return pa.types.is_boolean(t)
    return pa.types.is_timestamp(t) or pa.types.is_date(t) or pa.types.is_integer(t)


def _cast(column: str, kind: str, values: pa.ChunkedArray) -> pa.ChunkedArray:
    target = KINDS[kind][0]
    t = values.type
    try:
        if pa.types.is_dictionary(t):
            values, t = values.cast(t.value_type), t.value_type
        if not _family(kind, t):
            raise FileRejected(f"column '{column}': expected {kind}, got {t}")
        if kind == "timestamp" and pa.types.is_integer(t):
            values = values.cast(pa.int64())  # epoch microseconds
        options = pc.CastOptions(target_type=target, allow_time_truncate=kind == "timestamp")
        return pc.cast(values, options=options)
    except pa.ArrowException as err:
        raise FileRejected(f"column '{column}': cannot be read as {kind}: {err}") from None


# ---------------------------------------------------------------------------------------------
# Rows


def _row_reasons(table: pa.Table, source: FileSchema) -> dict[int, str]:
    """Each bad row's index and the first problem in column order, as JSON lines word it."""
    reasons: dict[int, str] = {}
    taken = np.zeros(table.num_rows, dtype=bool)

    def flag(mask: np.ndarray, reason: Any) -> None:
        for i in np.flatnonzero(mask & ~taken):
            reasons[int(i)] = reason(int(i))
        taken[:] |= mask

    for column, kind in source.columns:
        values = table.column(column)
        if values.null_count and not source.nullable(column, kind):
            flag(
                values.is_null().to_numpy(zero_copy_only=False),
                lambda _, c=column: f"field '{c}': must not be null",
            )
        if source.non_negative(kind):
            negative = pc.fill_null(pc.less(values, 0), False).to_numpy(zero_copy_only=False)
            flag(negative, lambda i, c=column, v=values: f"field '{c}': must be >= 0, got {v[i].as_py()}")
        if column == source.event_time:
            micros = values.cast(pa.int64())
            late = pc.fill_null(pc.greater_equal(micros, END_OF_STREAM_TIME_US), False)
            flag(
                late.to_numpy(zero_copy_only=False),
                lambda _, c=column: f"field '{c}': at or after the end-of-stream time {_EOS_TEXT}",
            )
    return reasons


def _record(table: pa.Table, row: int) -> str:
    """Row `row`'s values as a JSON object (timestamps in ISO-8601), for its dead letter."""

    def plain(value: object) -> object:
        if isinstance(value, datetime | date):
            return value.isoformat()
        raise TypeError(f"no JSON form for {value!r}")

    return json.dumps(table.slice(row, 1).to_pylist()[0], default=plain, ensure_ascii=False)

"""Order-insensitive comparison of query results, used by every test and by the CLI.

Why order-insensitive: Spark writes a streaming result as many part files in whatever order tasks and
micro-batches finish, while the batch reference writes one file; only the multiset of rows means
anything. Why a tolerance: averages (Q4, Q6) are summed in a different order by Spark and DuckDB, so
doubles may differ in the last bits; docs/queries.md fixes the tolerance at 1e-9 relative.

How: rows equal bit for bit are cancelled in bulk by DuckDB's `EXCEPT ALL` (a multiset difference,
NULL equal to NULL), so large identical results cost one hash pass. Only the leftovers go through a
Python matcher that pairs rows with equal non-float columns and floats within the tolerance. That
leftover matching is exact about multiplicity: a duplicated row on one side is reported as extra.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from core.direct_sink import committed_chunk_files
from core.errors import InputError
from core.sink_log import committed_files, has_sink_log

#: How many missing and extra rows a diff shows; enough to spot a pattern, short enough for a log line.
MAX_EXAMPLES = 5

#: Above this many candidate pairs in one group the quadratic fallback of the matcher is skipped.
_MAX_PAIRS = 1_000_000

#: Below this many rows (both sides) the Python matcher alone is faster than starting DuckDB (~15 ms).
_SMALL_ROWS = 20_000

Row = tuple[Any, ...]


def _schema_text(schema: pa.Schema) -> str:
    return ", ".join(f"{f.name}: {f.type}" for f in schema)


def _schema_diff(actual: pa.Schema, expected: pa.Schema) -> str | None:
    """Describe a difference in column names, order or types; nullability and metadata are ignored
    because Spark's parquet writer and DuckDB disagree on them without any effect on values."""
    if actual.names == expected.names and all(
        a.type == e.type for a, e in zip(actual, expected, strict=True)
    ):
        return None
    lines = ["schema mismatch:"]
    if actual.names != expected.names:
        only_a = [n for n in actual.names if n not in expected.names]
        only_e = [n for n in expected.names if n not in actual.names]
        if only_a:
            lines.append(f"  columns only in actual: {', '.join(only_a)}")
        if only_e:
            lines.append(f"  columns only in expected: {', '.join(only_e)}")
        if not only_a and not only_e:
            lines.append("  same columns in a different order")
    for a in actual:
        if a.name in expected.names:
            e = expected.field(a.name) if expected.names.count(a.name) == 1 else None
            if e is not None and a.type != e.type:
                lines.append(f"  column {a.name}: actual {a.type}, expected {e.type}")
    lines.append(f"  actual:   {_schema_text(actual)}")
    lines.append(f"  expected: {_schema_text(expected)}")
    return "\n".join(lines)


def _rows(table: pa.Table) -> list[Row]:
    columns = [column.to_pylist() for column in table.columns]
    return list(zip(*columns, strict=True)) if columns else [() for _ in range(table.num_rows)]


def _exact_leftovers(actual: pa.Table, expected: pa.Table) -> tuple[list[Row], list[Row]]:
    """Rows of each side that have no bit-identical partner on the other side (multiset difference).

    Falls back to every row when DuckDB cannot ingest a column type; the Python matcher then does all
    the work, which is slower but equally correct.
    """
    try:
        import duckdb

        names = [f"c{i}" for i in range(actual.num_columns)]
        con = duckdb.connect(":memory:")
        try:
            con.register("actual_rows", actual.rename_columns(names))
            con.register("expected_rows", expected.rename_columns(names))
            cols = ", ".join(names)
            extra = con.sql(
                f"SELECT {cols} FROM actual_rows EXCEPT ALL SELECT {cols} FROM expected_rows"
            ).to_arrow_table()
            missing = con.sql(
                f"SELECT {cols} FROM expected_rows EXCEPT ALL SELECT {cols} FROM actual_rows"
            ).to_arrow_table()
        finally:
            con.close()
        # Back to the callers' types, so leftovers compare and print exactly like the input data.
        schema = pa.schema([pa.field(n, f.type) for n, f in zip(names, actual.schema, strict=True)])
        return _rows(extra.cast(schema)), _rows(missing.cast(schema))
    except Exception:  # any ingest problem just disables the fast path
        return _rows(actual), _rows(expected)


def _freeze(value: Any) -> Any:
    """A hashable stand-in for list/dict/struct values so rows can be grouped by their exact columns."""
    if isinstance(value, list):
        return ("__list__", *(_freeze(v) for v in value))
    if isinstance(value, dict):
        return ("__dict__", *((k, _freeze(v)) for k, v in value.items()))
    return value


def _float_order(values: Row) -> tuple[Any, ...]:
    """Sort key for float tuples that tolerates None and NaN (None first, NaN last)."""
    return tuple(
        (v is not None, v is not None and math.isnan(v), 0.0 if v is None or math.isnan(v) else v)
        for v in values
    )


def _close(a: Row, b: Row, rel_tol: float, abs_tol: float) -> bool:
    for x, y in zip(a, b, strict=True):
        if x is None or y is None:
            if x is not y:
                return False
        elif math.isnan(x) or math.isnan(y):
            if not (math.isnan(x) and math.isnan(y)):
                return False
        elif not math.isclose(x, y, rel_tol=rel_tol, abs_tol=abs_tol):
            return False
    return True


def _match_group(
    actual: list[Row], expected: list[Row], rel_tol: float, abs_tol: float
) -> tuple[list[int], list[int]]:
    """Pair float tuples within tolerance; return indices of unpaired actual and expected tuples.

    A sorted two-pointer sweep pairs the usual case in linear time; rows it leaves (possible only when
    several float columns interleave within the tolerance) get a quadratic greedy pass when small.
    """
    a_order = sorted(range(len(actual)), key=lambda i: _float_order(actual[i]))
    e_order = sorted(range(len(expected)), key=lambda i: _float_order(expected[i]))
    a_left: list[int] = []
    e_left: list[int] = []
    i = j = 0
    while i < len(a_order) and j < len(e_order):
        ai, ej = a_order[i], e_order[j]
        if _close(actual[ai], expected[ej], rel_tol, abs_tol):
            i += 1
            j += 1
        elif _float_order(actual[ai]) < _float_order(expected[ej]):
            a_left.append(ai)
            i += 1
        else:
            e_left.append(ej)
            j += 1
    a_left.extend(a_order[i:])
    e_left.extend(e_order[j:])
    if a_left and e_left and len(a_left) * len(e_left) <= _MAX_PAIRS:
        still_a: list[int] = []
        for ai in a_left:
            for pos, ej in enumerate(e_left):
                if _close(actual[ai], expected[ej], rel_tol, abs_tol):
                    del e_left[pos]
                    break
            else:
                still_a.append(ai)
        a_left = still_a
    return a_left, e_left


def _tolerant_leftovers(
    actual: list[Row], expected: list[Row], float_cols: Sequence[int], rel_tol: float, abs_tol: float
) -> tuple[list[Row], list[Row]]:
    """Multiset difference where float columns match within tolerance and all others exactly."""
    floats = set(float_cols)

    def split(row: Row) -> tuple[Row, Row]:
        key = tuple(_freeze(v) for k, v in enumerate(row) if k not in floats)
        return key, tuple(row[k] for k in float_cols)

    groups: dict[Row, tuple[list[Row], list[Row], list[Row], list[Row]]] = defaultdict(
        lambda: ([], [], [], [])
    )
    for row in actual:
        key, vals = split(row)
        g = groups[key]
        g[0].append(row)
        g[1].append(vals)
    for row in expected:
        key, vals = split(row)
        g = groups[key]
        g[2].append(row)
        g[3].append(vals)
    extra: list[Row] = []
    missing: list[Row] = []
    for a_rows, a_vals, e_rows, e_vals in groups.values():
        if not float_cols:
            n = len(a_rows) - len(e_rows)
            extra.extend(a_rows[len(e_rows) :] if n > 0 else [])
            missing.extend(e_rows[len(a_rows) :] if n < 0 else [])
            continue
        a_idx, e_idx = _match_group(a_vals, e_vals, rel_tol, abs_tol)
        extra.extend(a_rows[i] for i in a_idx)
        missing.extend(e_rows[i] for i in e_idx)
    return extra, missing


def _fmt_value(value: Any) -> str:
    if isinstance(value, _dt.datetime):
        return value.isoformat()
    return repr(value)


def _fmt_rows(names: Sequence[str], rows: Iterable[Row]) -> list[str]:
    return [
        "  (" + ", ".join(f"{n}={_fmt_value(v)}" for n, v in zip(names, row, strict=True)) + ")"
        for row in rows
    ]


def _examples(names: Sequence[str], rows: list[Row]) -> list[str]:
    shown = sorted(rows, key=repr)[:MAX_EXAMPLES]
    lines = _fmt_rows(names, shown)
    if len(rows) > len(shown):
        lines.append(f"  ... and {len(rows) - len(shown)} more")
    return lines


@dataclass(frozen=True)
class RecordCheck:
    """How `actual` departs from `expected`, row by row: `lost` rows are expected but missing (or
    missing some of their copies), `duplicated` rows are expected but present more often, and
    `unexpected` rows match no expected row at all. All empty means the same multiset of rows."""

    lost: list[Row]
    duplicated: list[Row]
    unexpected: list[Row]

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected)


def check_records(
    actual: pa.Table, expected: pa.Table, rel_tol: float = 1e-9, *, abs_tol: float = 0.0
) -> RecordCheck:
    """Lost, duplicated and unexpected rows of `actual` against `expected` (same schema), with float
    columns matched within tolerance as in `diff_results`."""
    actual = actual.replace_schema_metadata(None).combine_chunks()
    expected = expected.replace_schema_metadata(None).combine_chunks()
    if actual.num_columns == 0:
        n = actual.num_rows - expected.num_rows
        return RecordCheck([()] * max(-n, 0), [()] * max(n, 0), [])
    if actual.num_rows + expected.num_rows <= _SMALL_ROWS:
        extra, missing = _rows(actual), _rows(expected)
    else:
        extra, missing = _exact_leftovers(actual, expected)
    float_cols = [i for i, f in enumerate(actual.schema) if pa.types.is_floating(f.type)]
    if extra or missing:
        extra, missing = _tolerant_leftovers(extra, missing, float_cols, rel_tol, abs_tol)
    if not extra:
        return RecordCheck(missing, [], [])
    # An extra row that equals some expected row is a second copy of it; any other one is new.
    known_extra, _ = _tolerant_leftovers(extra, _rows(expected), float_cols, rel_tol, abs_tol)
    unexpected_ids = {id(r) for r in known_extra}
    duplicated = [r for r in extra if id(r) not in unexpected_ids]
    return RecordCheck(missing, duplicated, [r for r in extra if id(r) in unexpected_ids])


def diff_results(
    actual: pa.Table, expected: pa.Table, rel_tol: float = 1e-9, *, abs_tol: float = 0.0
) -> str | None:
    """None when `actual` and `expected` hold the same multiset of rows, else a short description.

    Column names, order and types must match exactly (nullability and metadata are ignored). Float
    columns match when within `rel_tol` relative (or `abs_tol` absolute) difference, NaN matches NaN,
    NULL matches NULL; every other column must be equal. Row order never matters; multiplicity does:
    the description says how many rows were lost, duplicated and unexpected.
    """
    schema_problem = _schema_diff(actual.schema, expected.schema)
    if schema_problem is not None:
        return f"{schema_problem}\nrows: actual {actual.num_rows}, expected {expected.num_rows}"
    check = check_records(actual, expected, rel_tol, abs_tol=abs_tol)
    if check.ok:
        return None
    if actual.num_columns == 0:
        return f"row count: actual {actual.num_rows}, expected {expected.num_rows} (no columns)"

    names = actual.schema.names
    if actual.num_rows != expected.num_rows:
        lines = [f"row count: actual {actual.num_rows}, expected {expected.num_rows}"]
    else:
        lines = [f"row count equal ({actual.num_rows}) but rows differ"]
    for rows, what in (
        (check.lost, "missing (lost: expected, not in actual)"),
        (check.duplicated, "extra, duplicated (in actual more often than expected)"),
        (check.unexpected, "extra, unexpected (in actual, matching no expected row)"),
    ):
        if rows:
            lines.append(f"{len(rows)} row(s) {what}, e.g.:")
            lines.extend(_examples(names, rows))
    return "\n".join(lines)


def assert_same_results(actual: pa.Table, expected: pa.Table, rel_tol: float = 1e-9) -> None:
    """Raise AssertionError carrying the diff text when the results differ (for tests and the CLI)."""
    problem = diff_results(actual, expected, rel_tol)
    if problem is not None:
        raise AssertionError(problem)


def _parquet_files(root: Path) -> list[Path]:
    """Data files under `root`, skipping Spark's bookkeeping: `_spark_metadata`, `_SUCCESS`, `.crc`
    files and anything else whose path has a component starting with `_` or `.`."""
    files = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).parts
        if any(part.startswith(("_", ".")) for part in rel):
            continue
        if path.is_file() and path.name.endswith(".parquet"):
            files.append(path)
    return sorted(files)


def read_results(path: str | Path, schema: pa.Schema | None = None) -> pa.Table:
    """Read every parquet file under the directory `path` into one table (order is not meaningful).

    A streaming file sink's output is read through its log (core/sink_log.py): only the files of
    committed epochs count, as for Spark's own readers; so do the workers' files written beside it
    (core/direct_sink.py).

    A directory without data files yields an empty table: with `schema` when given (a streaming query
    that produced no rows may write no file at all), else with no columns. A single file path is read
    as is. Schema metadata is dropped because Spark and DuckDB write different, irrelevant metadata.
    """
    root = Path(path)
    if not root.exists():
        raise InputError(f"result path {root} does not exist", hint="check the --out directory of the run")
    if root.is_file():
        files = [root]
    else:
        files = committed_files(root) if has_sink_log(root) else _parquet_files(root)
        files += committed_chunk_files(root)
    if not files:
        return schema.empty_table() if schema is not None else pa.table({})
    tables = [pq.read_table(f).replace_schema_metadata(None) for f in files]
    hint = "remove stale output from an earlier run of a different query"
    for f, t in zip(files, tables, strict=True):
        if t.column_names != tables[0].column_names:
            raise InputError(
                f"{f} has columns {t.column_names}, but {files[0]} has {tables[0].column_names}", hint=hint
            )
    try:
        # "default" only reconciles nullability and all-null columns; real type differences still fail.
        return pa.concat_tables(tables, promote_options="default")
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise InputError(f"parquet files under {root} have incompatible schemas: {err}", hint=hint) from err

"""Partial aggregate tables: the rows a transient window aggregate hands back, and how they fold.

Why one module: a Lambda worker builds partials from its share of an epoch, the VM side merges
them into Spark's state (paper section 4.5), and both must agree on the row type to the last column
type. `partial_schema` is that row type; `partial_aggregate`, `merge_partials` and `finalize` run the
fold rules of merge/algebra.py in polars (merge/polars_fold.py) over whole Arrow tables:

    finalize(op, merge_partials(op, [partial_aggregate(op, A), partial_aggregate(op, B)]))
        == aggregate of A ∪ B

A partial row is one (window_start, window_end, keys...) group with each aggregate's partial
columns (merge/algebra.py has the table); a column of the argument's type takes the Arrow type of
the argument expression, a record list the types of the columns it copies.

Windows follow Spark (core/spark/lower.py): event-time windows aligned to the Unix epoch, a
tumbling window of size W is [k*W, (k+1)*W). A sliding window is aggregated per *pane*, the tumbling
window of its slide; window_start/window_end of a sliding partial are the pane's bounds, and
`finalize` folds each pane into the W/P windows that contain it. A window aggregate with
`window=None` regroups the window an upstream operator assigned: its input carries window_start and
window_end columns, and the key "window" stands for them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl
import pyarrow as pa

from core.arrow_types import ARROW_TYPES, TIMESTAMP, to_dtype
from core.errors import PlanError
from core.expr import DType
from core.plan import WINDOW, AggCall, WindowAggregate
from merge import polars_fold
from merge.algebra import ColumnType, Finish, check_supported, kind_of, record_head

WINDOW_START = "window_start"
WINDOW_END = "window_end"
_US = 1_000_000

# ---- schemas -----------------------------------------------------------------------------------


def normalise_type(t: pa.DataType) -> pa.DataType:
    """The canonical Arrow type of a column: polars' large strings/lists become plain ones, UTC micros."""
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, normalise_type(f.type)) for f in t])
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return pa.list_(normalise_type(t.value_type))
    if pa.types.is_dictionary(t):
        return normalise_type(t.value_type)
    if pa.types.is_null(t):
        return t
    return ARROW_TYPES[to_dtype(t)]


def normalise_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([pa.field(f.name, normalise_type(f.type)) for f in schema])


def windowed(op: WindowAggregate) -> bool:
    """True when the groups carry window_start/window_end (an own window, or a regrouped one)."""
    return op.window is not None or WINDOW in op.keys


def group_columns(op: WindowAggregate) -> list[str]:
    """The columns a partial row is keyed by, in order."""
    return ([WINDOW_START, WINDOW_END] if windowed(op) else []) + [k for k in op.keys if k != WINDOW]


def pane_seconds(op: WindowAggregate) -> int:
    """Width of the tumbling unit a partial is computed in: the slide (== size when tumbling)."""
    if op.window is None:
        raise PlanError("a regrouping aggregate has no panes")
    return op.window.slide_s


def _dtypes(input_schema: pa.Schema) -> dict[str, DType]:
    return {f.name: to_dtype(f.type) for f in input_schema}


def _column_type(input_schema: pa.Schema, name: str) -> pa.DataType:
    if name not in input_schema.names:
        raise PlanError(
            f"column {name!r} is not in the aggregate's input",
            hint=f"input columns: {', '.join(input_schema.names)}",
        )
    return normalise_type(input_schema.field(name).type)


def _arg_type(call: AggCall, input_schema: pa.Schema) -> pa.DataType:
    assert call.arg is not None
    dtype = call.arg.dtype(_dtypes(input_schema))
    if dtype not in ARROW_TYPES:
        raise PlanError(f"aggregate {call.fn} {call.out!r} cannot take a {dtype.value} argument")
    return ARROW_TYPES[dtype]


_COLUMN_TYPES = {ColumnType.INT64: pa.int64(), ColumnType.FLOAT64: pa.float64()}


def _partial_fields(call: AggCall, input_schema: pa.Schema) -> list[pa.Field]:
    k = kind_of(call)
    arg = _arg_type(call, input_schema) if call.arg is not None and k.signature.needs_arg else None
    if k.keep is None:
        return [pa.field(c.name(call.out), _COLUMN_TYPES.get(c.type, arg)) for c in k.columns]
    head = [
        pa.field(f, arg if src is None else _column_type(input_schema, src)) for f, src in record_head(call)
    ]
    fields = [pa.field(f, _column_type(input_schema, f)) for f in call.fields]
    return [pa.field(call.out, pa.list_(pa.struct(head + fields)))]


def _group_fields(op: WindowAggregate, input_schema: pa.Schema) -> list[pa.Field]:
    if op.window is None and WINDOW in op.keys:
        for c in (WINDOW_START, WINDOW_END):
            if c not in input_schema.names:
                raise PlanError(
                    f"regrouping by window needs a {c} column in the input",
                    hint="the upstream windowed operator's output carries window_start/window_end",
                )
    if op.window is not None:
        _column_type(input_schema, op.window.on)
    fields = [pa.field(WINDOW_START, TIMESTAMP), pa.field(WINDOW_END, TIMESTAMP)] if windowed(op) else []
    return fields + [pa.field(k, _column_type(input_schema, k)) for k in op.keys if k != WINDOW]


def partial_schema(op: WindowAggregate, input_schema: pa.Schema) -> pa.Schema:
    """The row type of `op`'s partial state, given the Arrow schema of the records it aggregates."""
    check_supported(op)
    fields = _group_fields(op, input_schema)
    for call in op.aggs:
        fields += _partial_fields(call, input_schema)
    return pa.schema(fields)


def partial_form(op: WindowAggregate, columns: Mapping[str, DType]) -> dict[str, DType]:
    """The columns of `op`'s rows in partial form as the VM lays them out before its merge
    (merge/spark/partial_form.py): the event-time column, the keys, the partial columns; `columns`
    are the records' columns."""
    if op.window is None:
        raise PlanError("only an aggregate with a window of its own has rows in partial form")
    fields = partial_schema(op, pa.schema([(c, ARROW_TYPES[t]) for c, t in columns.items()]))
    rest = {f.name: to_dtype(f.type) for f in fields if f.name not in (WINDOW_START, WINDOW_END)}
    return {op.window.on: DType.TIMESTAMP, **rest}


def final_schema(op: WindowAggregate, partial: pa.Schema) -> pa.Schema:
    """The row type of `op`'s finished result, derived from its partial row type."""
    fields = [partial.field(c) for c in group_columns(op)]
    for call in op.aggs:
        match kind_of(call).finish:
            case Finish.VALUE:
                fields.append(partial.field(call.out))
            case Finish.RATIO:
                fields.append(pa.field(call.out, pa.float64()))
            case Finish.FIELDS:
                struct = partial.field(call.out).type.value_type
                fields.append(pa.field(call.out, pa.list_(pa.struct([struct.field(f) for f in call.fields]))))
    return pa.schema(fields)


# ---- folding tables ----------------------------------------------------------------------------


def _assign_panes(op: WindowAggregate, df: pl.DataFrame) -> pl.DataFrame:
    if op.window is None:
        return df
    step = pane_seconds(op) * _US
    start = polars_fold.floor_to(pl.col(op.window.on).dt.epoch("us"), step)
    return df.with_columns(
        start.cast(pl.Datetime("us", "UTC")).alias(WINDOW_START),
        (start + step).cast(pl.Datetime("us", "UTC")).alias(WINDOW_END),
    )


def _conform(df: pl.DataFrame, schema: pa.Schema) -> pa.Table:
    return df.select(schema.names).to_arrow().cast(schema)


def _frame(data: pa.Table | pa.RecordBatch) -> pl.DataFrame:
    return pl.from_arrow(data)  # type: ignore[return-value]


def partial_aggregate(op: WindowAggregate, data: pa.Table | pa.RecordBatch) -> pa.Table:
    """The partial state of `op` over `data`: one row per group present in `data`."""
    schema = partial_schema(op, data.schema)
    if data.num_rows == 0:
        return schema.empty_table()
    df = _assign_panes(op, _frame(data))
    return _conform(polars_fold.fold(df, group_columns(op), op.aggs, from_records=True), schema)


def latest_partial_schema(op: WindowAggregate, input_schema: pa.Schema) -> pa.Schema:
    """The row type of `latest_partials`: the window's event-time column, the keys, the partials."""
    assert op.window is not None
    schema = partial_schema(op, input_schema)
    grouped = set(group_columns(op))
    on = pa.field(op.window.on, _column_type(input_schema, op.window.on))
    return pa.schema([on, *(f for f in schema if f.name not in grouped or f.name in op.keys)])


def latest_partials(op: WindowAggregate, df: pl.DataFrame) -> pl.DataFrame:
    """`op`'s partial state of the records `df` per (pane, keys), each row carrying the latest event
    time of its records in place of the pane's bounds.

    Why the latest: an operator that emits its rows as the watermark passes their event time (the
    winners at their close) hands them to `op` through Spark's late filter, which a pane's start
    may already be behind; the latest event time of the records is no earlier than any of them, and
    assigns the row to the same pane."""
    assert op.window is not None
    schema = latest_partial_schema(op, df.to_arrow().schema)
    if df.height == 0:
        return pl.from_arrow(schema.empty_table())  # type: ignore[return-value]
    by = [WINDOW_START, *op.keys]
    panes = _assign_panes(op, df)
    folded = polars_fold.fold(panes, by, op.aggs, from_records=True)
    latest = panes.group_by(by).agg(pl.col(op.window.on).max())
    return _frame(_conform(folded.join(latest, on=by, nulls_equal=True), schema))


def _as_table(data: pa.Table | pa.RecordBatch) -> pa.Table:
    return pa.Table.from_batches([data]) if isinstance(data, pa.RecordBatch) else data


def merge_partials(
    op: WindowAggregate, tables: Sequence[pa.Table | pa.RecordBatch], schema: pa.Schema | None = None
) -> pa.Table:
    """Fold partial tables of `op` into one partial table with a single row per group.

    Associative and commutative, so partials from the VM path and any number of workers can be
    merged in any order and grouping. `schema` is needed only when `tables` is empty.
    """
    check_supported(op)
    tables = [_as_table(t) for t in tables]
    if schema is None:
        if not tables:
            raise PlanError("merge_partials needs at least one table, or the partial schema")
        schema = normalise_schema(tables[0].schema)
    for t in tables:
        if normalise_schema(t.schema) != schema:
            raise PlanError(
                f"partials of different row types cannot be merged: {normalise_schema(t.schema)} vs {schema}",
                hint="every partial of an operator must come from the same program",
            )
    tables = [t for t in tables if t.num_rows]
    if not tables:
        return schema.empty_table()
    df = _frame(pa.concat_tables([t.cast(schema) for t in tables]))
    return _conform(polars_fold.fold(df, group_columns(op), op.aggs, from_records=False), schema)


def _panes_to_windows(op: WindowAggregate, partial: pa.Table) -> pa.Table:
    """Each pane [p, p+P) belongs to the W/P sliding windows [p - k*P, p - k*P + W)."""
    assert op.window is not None
    size, slide = op.window.size_s * _US, op.window.slide_s * _US
    df = _frame(partial)
    start = pl.col(WINDOW_START).dt.epoch("us")
    shifted = [
        df.with_columns(
            (start - k * slide).cast(pl.Datetime("us", "UTC")).alias(WINDOW_START),
            (start - k * slide + size).cast(pl.Datetime("us", "UTC")).alias(WINDOW_END),
        )
        for k in range(op.window.size_s // op.window.slide_s)
    ]
    return merge_partials(op, [_conform(s, partial.schema) for s in shifted], partial.schema)


def finalize(op: WindowAggregate, partial: pa.Table | pa.RecordBatch) -> pa.Table:
    """The finished result of `op` from its (merged) partial state: what Spark's aggregate emits."""
    check_supported(op)
    partial = _as_table(partial)
    schema = normalise_schema(partial.schema)
    if op.window is not None and not op.window.tumbling:
        partial = _panes_to_windows(op, partial.cast(schema))
    else:
        partial = merge_partials(op, [partial], schema)
    out_schema = final_schema(op, schema)
    if partial.num_rows == 0:
        return out_schema.empty_table()
    exprs = [pl.col(c) for c in group_columns(op)] + [polars_fold.finish(call) for call in op.aggs]
    return _conform(_frame(partial).select(exprs), out_schema)

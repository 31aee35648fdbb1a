"""Partial aggregates: the one definition of the rows a transient window aggregate hands back.

Why one module: a Lambda worker builds partials from its share of an epoch, the VM side merges
them into Spark's state (paper section 4.5), and both must agree on the row type to the last column
type. `partial_schema` is that row type; `partial_aggregate`, `merge_partials` and `finalize` are the
pure polars implementations that prove the algebra:

    finalize(op, merge_partials(op, [partial_aggregate(op, A), partial_aggregate(op, B)]))
        == aggregate of A ∪ B

A partial row is one (window_start, window_end, keys...) group with these columns per aggregate:

| aggregate     | partial columns                                                            |
|---------------|----------------------------------------------------------------------------|
| count         | `<out>` int64                                                              |
| sum, min, max | `<out>` of the argument's type (null when every argument was null)         |
| avg           | `<out>__sum` float64 and `<out>__count` int64 (non-null arguments)         |
| max_with_ties | `<out>` list<struct<_v, fields...>>: the records at the group's maximum    |
| latest_n      | `<out>` list<struct<_k0.., fields...>>: the n greatest by (order_by, fields)|

Windows follow Spark (core/spark/lower.py): event-time windows aligned to the Unix epoch, a
tumbling window of size W is [k*W, (k+1)*W). A sliding window is aggregated per *pane*, the tumbling
window of its slide; window_start/window_end of a sliding partial are the pane's bounds, and
`finalize` folds each pane into the W/P windows that contain it. A window aggregate with
`window=None` regroups the window an upstream operator assigned: its input carries window_start and
window_end columns, and the key "window" stands for them.

This module should live in merge/ next to the VM-side merge; it sits here only because of file
ownership while the two sides are built (merge/ can re-export it unchanged).
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl
import pyarrow as pa

from core.arrow_types import ARROW_TYPES, TIMESTAMP, to_dtype
from core.errors import PlanError
from core.expr import DType
from core.expr_polars import to_polars
from core.plan import WINDOW, AggCall, WindowAggregate

WINDOW_START = "window_start"
WINDOW_END = "window_end"
_US = 1_000_000

SUPPORTED = ("count", "sum", "min", "max", "avg", "max_with_ties", "latest_n")
PANE_MERGEABLE = ("count", "sum", "min", "max", "avg")
"""Aggregates that a sliding window can be assembled from (the same set Spark's lowering accepts)."""

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


def check_supported(op: WindowAggregate) -> None:
    for call in op.aggs:
        if call.fn not in SUPPORTED:
            raise PlanError(
                f"aggregate {call.fn!r} has no partial form",
                hint=f"transient aggregates: {', '.join(SUPPORTED)}",
            )
        if op.window is not None and not op.window.tumbling and call.fn not in PANE_MERGEABLE:
            raise PlanError(
                f"aggregate {call.fn} is not supported on sliding windows", hint="use a tumbling window"
            )
        if call.fn == "latest_n" and (call.n <= 0 or not call.order_by):
            raise PlanError(f"latest_n {call.out!r} needs n > 0 and an order_by")
        if call.fn in ("sum", "min", "max", "avg", "max_with_ties") and call.arg is None:
            raise PlanError(f"aggregate {call.fn} {call.out!r} needs an argument")


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


def _record_struct(call: AggCall, input_schema: pa.Schema) -> pa.StructType:
    if call.fn == "max_with_ties":
        head = [pa.field("_v", _arg_type(call, input_schema))]
    else:
        head = [pa.field(f"_k{i}", _column_type(input_schema, k)) for i, k in enumerate(call.order_by)]
    return pa.struct(head + [pa.field(f, _column_type(input_schema, f)) for f in call.fields])


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
        match call.fn:
            case "count":
                fields.append(pa.field(call.out, pa.int64()))
            case "sum" | "min" | "max":
                fields.append(pa.field(call.out, _arg_type(call, input_schema)))
            case "avg":
                _arg_type(call, input_schema)
                fields += [
                    pa.field(f"{call.out}__sum", pa.float64()),
                    pa.field(f"{call.out}__count", pa.int64()),
                ]
            case _:
                fields.append(pa.field(call.out, pa.list_(_record_struct(call, input_schema))))
    return pa.schema(fields)


def final_schema(op: WindowAggregate, partial: pa.Schema) -> pa.Schema:
    """The row type of `op`'s finished result, derived from its partial row type."""
    fields = [partial.field(c) for c in group_columns(op)]
    for call in op.aggs:
        if call.fn == "avg":
            fields.append(pa.field(call.out, pa.float64()))
        elif call.fn in ("max_with_ties", "latest_n"):
            struct = partial.field(call.out).type.value_type
            fields.append(pa.field(call.out, pa.list_(pa.struct([struct.field(f) for f in call.fields]))))
        else:
            fields.append(partial.field(call.out))
    return pa.schema(fields)


# ---- building partials -------------------------------------------------------------------------


def _assign_panes(op: WindowAggregate, df: pl.DataFrame) -> pl.DataFrame:
    if op.window is None:
        return df
    step = pane_seconds(op) * _US
    us = pl.col(op.window.on).dt.epoch("us")
    start = us - us % step  # polars' % takes the divisor's sign: a floor, also before 1970
    return df.with_columns(
        start.cast(pl.Datetime("us", "UTC")).alias(WINDOW_START),
        (start + step).cast(pl.Datetime("us", "UTC")).alias(WINDOW_END),
    )


def _sum_or_null(e: pl.Expr) -> pl.Expr:
    """Spark's sum: null when no argument was non-null (polars would say 0)."""
    return pl.when(e.count() > 0).then(e.sum()).otherwise(None)


_ONE_GROUP = "__group"
_RANK = "__rank"
KEPT = ("max_with_ties", "latest_n")


def _record_keys(call: AggCall) -> list[str]:
    """The struct fields a record list is ordered by: the value, or the order keys then the fields."""
    if call.fn == "max_with_ties":
        return ["_v"]
    return [f"_k{i}" for i in range(len(call.order_by))] + list(call.fields)


def _keep_records(recs: pl.DataFrame, by: list[str], call: AggCall) -> pl.DataFrame:
    """Reduce a frame of (by..., record struct) rows to one list of kept records per group.

    Frame-level sorts and windows, not list expressions inside a group_by: those crashed polars 2.1
    on exploded struct lists. Within a group, group_by keeps the rows' order, so sorting first and
    taking the head gives the n greatest.
    """
    rec = pl.col(call.out)
    if call.fn == "max_with_ties":
        v = rec.struct.field("_v")
        recs = recs.filter(v.is_not_null()).filter(v == v.max().over(by))
    else:
        keys = [rec.struct.field(k) for k in _record_keys(call)]
        recs = recs.sort(keys, descending=True, nulls_last=True)
        recs = recs.filter(pl.int_range(pl.len()).over(by) < call.n)
    return recs.group_by(by, maintain_order=True).agg(rec)


def _aggregate(
    df: pl.DataFrame, by: list[str], scalars: list[pl.Expr], records: list[tuple[AggCall, pl.Expr]]
) -> pl.DataFrame:
    """Group `df` by `by`: scalar aggregates in one pass, each record list reduced and joined on."""
    keys = by or [_ONE_GROUP]
    if not by:
        df = df.with_columns(pl.lit(0, dtype=pl.Int8).alias(_ONE_GROUP))
    out = df.group_by(keys).agg(scalars) if scalars else df.select(keys).unique()
    for call, rec in records:
        recs = df.select([*keys, rec.alias(call.out)])
        if isinstance(recs.schema[call.out], pl.List):
            recs = recs.explode(call.out, keep_nulls=False, empty_as_null=False)
        struct_type = recs.schema[call.out]
        lists = _keep_records(recs, keys, call)
        out = out.join(lists, on=keys, how="left", nulls_equal=True)
        out = out.with_columns(pl.col(call.out).fill_null(pl.lit([], dtype=pl.List(struct_type))))
    return out.drop(_ONE_GROUP) if not by else out


def _partial_exprs(call: AggCall) -> tuple[list[pl.Expr], pl.Expr | None]:
    """(scalar aggregate expressions, record struct expression) of one call's partial."""
    arg = to_polars(call.arg) if call.arg is not None else None
    match call.fn:
        case "count":
            return [pl.len().cast(pl.Int64).alias(call.out)], None
        case "sum":
            return [_sum_or_null(arg).alias(call.out)], None
        case "min":
            return [arg.min().alias(call.out)], None
        case "max":
            return [arg.max().alias(call.out)], None
        case "avg":
            return [
                arg.cast(pl.Float64).sum().alias(f"{call.out}__sum"),
                arg.count().cast(pl.Int64).alias(f"{call.out}__count"),
            ], None
        case "max_with_ties":
            return [], pl.struct([arg.alias("_v"), *[pl.col(f) for f in call.fields]])
        case "latest_n":
            keys = [pl.col(k).alias(f"_k{i}") for i, k in enumerate(call.order_by)]
            return [], pl.struct([*keys, *[pl.col(f) for f in call.fields]])
    raise PlanError(f"no partial form for {call.fn!r}")


def _merge_exprs(call: AggCall) -> tuple[list[pl.Expr], pl.Expr | None]:
    c = pl.col(call.out)
    match call.fn:
        case "count":
            return [c.sum().alias(call.out)], None
        case "sum":
            return [_sum_or_null(c).alias(call.out)], None
        case "min":
            return [c.min().alias(call.out)], None
        case "max":
            return [c.max().alias(call.out)], None
        case "avg":
            return [pl.col(f"{call.out}__sum").sum(), pl.col(f"{call.out}__count").sum()], None
        case _:
            return [], c


def _group(df: pl.DataFrame, by: list[str], op: WindowAggregate, merge: bool) -> pl.DataFrame:
    scalars: list[pl.Expr] = []
    records: list[tuple[AggCall, pl.Expr]] = []
    for call in op.aggs:
        exprs, rec = _merge_exprs(call) if merge else _partial_exprs(call)
        scalars += exprs
        if rec is not None:
            records.append((call, rec))
    return _aggregate(df, by, scalars, records)


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
    return _conform(_group(df, group_columns(op), op, merge=False), schema)


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
    return _conform(_group(df, group_columns(op), op, merge=True), schema)


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
    exprs: list[pl.Expr] = [pl.col(c) for c in group_columns(op)]
    for call in op.aggs:
        c = pl.col(call.out)
        if call.fn == "avg":
            s, n = pl.col(f"{call.out}__sum"), pl.col(f"{call.out}__count")
            exprs.append(pl.when(n > 0).then(s / n).otherwise(None).alias(call.out))
        elif call.fn in ("max_with_ties", "latest_n"):
            keep = pl.struct([pl.element().struct.field(f) for f in call.fields])
            exprs.append(c.list.eval(keep).alias(call.out))
        else:
            exprs.append(c)
    return _conform(_frame(partial).select(exprs), out_schema)

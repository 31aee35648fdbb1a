"""The fold rules of merge/algebra.py as Spark Columns: what the VM's aggregates compute.

Why a translator and not rules: every rule is the algebra's; this module only says how Spark spells
it, so the VM folds exactly what the workers fold (merge/polars_fold.py spells the same rules for
polars). Each function takes a call's argument already lowered to a Column (core/spark/lower.py
lowers expressions; the fold code stays free of the query language's Spark backend).

A fold runs over *records* (the query's rows, each lifted into partial form inside the aggregate)
or over *partial rows* (the workers' rows, the VM's records put in partial form by `lifted`, or the
panes of a sliding window). Where Spark has a native aggregate for a rule over records, it is used:
a sum of ones is count(1), a sum of presence flags is count(arg), avg's ratio of sums is avg(arg).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.plan import AggCall
from merge.algebra import (
    VALUE_FIELD,
    ColumnType,
    Combine,
    Finish,
    Keep,
    Lift,
    PartialColumn,
    kind_of,
    record_head,
)

_TYPES = {ColumnType.INT64: "bigint", ColumnType.FLOAT64: "double"}


def _typed(c: Column, t: ColumnType) -> Column:
    return c.cast(_TYPES[t]) if t in _TYPES else c


def _reduce(combine: Combine, c: Column) -> Column:
    match combine:
        case Combine.SUM | Combine.SUM_OR_NULL:  # Spark's sum of no value is null already
            return F.sum(c)
        case Combine.MIN:
            return F.min(c)
        case Combine.MAX:
            return F.max(c)


def _lift(column: PartialColumn, arg: Column | None) -> Column:
    match column.lift:
        case Lift.ONE:
            value = F.lit(1)
        case Lift.ARG_PRESENT:
            assert arg is not None
            value = F.when(arg.isNotNull(), F.lit(1)).otherwise(F.lit(0))
        case Lift.ARG:
            assert arg is not None
            value = arg
    return _typed(value, column.type)


def _from_records(column: PartialColumn, arg: Column | None) -> Column:
    """One partial column over a group's records; Spark's count is a bigint already."""
    match column.lift:
        case Lift.ONE:  # a sum of ones
            return F.count(F.lit(1))
        case Lift.ARG_PRESENT:  # a sum of presence flags
            return F.count(arg)
        case Lift.ARG:
            return _reduce(column.combine, _lift(column, arg))


def record(call: AggCall, arg: Column | None) -> Column:
    """One record of a record-keeping `call` as the struct its lists hold."""
    head = [(arg if src is None else F.col(src)).alias(f) for f, src in record_head(call)]  # type: ignore[union-attr]
    return F.struct(*head, *[F.col(f) for f in call.fields])


def lifted(call: AggCall, arg: Column | None) -> list[Column]:
    """A record's partial columns of `call` (a stateless projection: the record in partial form)."""
    k = kind_of(call)
    if k.keep is not None:
        return [F.array(record(call, arg)).alias(call.out)]
    return [_lift(c, arg).alias(c.name(call.out)) for c in k.columns]


def _folded(column: PartialColumn, call: AggCall, arg: Column | None, from_records: bool) -> Column:
    if from_records:
        return _from_records(column, arg)
    return _reduce(column.combine, F.col(column.name(call.out)))


def partial_columns(call: AggCall, arg: Column | None, from_records: bool) -> list[Column]:
    """`call`'s scalar partial columns folded over a group (a sliding window's pane step)."""
    return [_folded(c, call, arg, from_records).alias(c.name(call.out)) for c in kind_of(call).columns]


def finished(call: AggCall, arg: Column | None, from_records: bool) -> Column:
    """`call`'s result folded over a group in one aggregate; a record list still holds every record
    (`trim` keeps and cuts them after the aggregation)."""
    k = kind_of(call)
    if k.keep is not None:
        if from_records:
            return F.collect_list(record(call, arg)).alias(call.out)
        return F.flatten(F.collect_list(F.col(call.out))).alias(call.out)
    if from_records and k.finish == Finish.RATIO:  # Spark's avg: the same ratio, in one aggregate buffer
        return F.avg(arg).alias(call.out)
    parts = [_folded(c, call, arg, from_records) for c in k.columns]
    if k.finish == Finish.RATIO:
        return F.try_divide(*parts).alias(call.out)  # null, not an ANSI error, over no value
    (value,) = parts
    return value.alias(call.out)


def _best(call: AggCall) -> str:
    return f"_best_{call.out}"


def helpers(call: AggCall, arg: Column | None, from_records: bool) -> list[Column]:
    """Aggregates a keep rule reads in `trim`, computed beside `finished`: the maximum of
    TIES_AT_MAX is its own aggregate, because a threshold computed in a projection is inlined into
    the filter's lambda by Spark's optimizer and then recomputed for every element of the list."""
    if kind_of(call).keep != Keep.TIES_AT_MAX:
        return []
    if from_records:
        return [F.max(arg).alias(_best(call))]
    return [F.max(F.array_max(F.transform(F.col(call.out), lambda x: x[VALUE_FIELD]))).alias(_best(call))]


def _fields(fields: tuple[str, ...]) -> Callable[[Column], Column]:
    """A one-argument lambda for F.transform (a second argument would receive the element index)."""
    return lambda x: F.struct(*[x[f].alias(f) for f in fields])


def _at(field: str, column: str) -> Callable[[Column], Column]:
    return lambda x: x[field] == F.col(column)


def trim(df: DataFrame, calls: Sequence[AggCall]) -> DataFrame:
    """The stateless step after the aggregation: each record list kept by its rule and finished
    (cut down to the call's fields), so Spark's state holds one untrimmed list per group."""
    for call in calls:
        keep = kind_of(call).keep
        if keep is None:
            continue
        c = F.col(call.out)
        if keep == Keep.TIES_AT_MAX:
            kept = F.filter(c, _at(VALUE_FIELD, _best(call)))
        else:
            kept = F.slice(F.sort_array(c, asc=False), 1, call.n)
        df = df.withColumn(call.out, F.transform(kept, _fields(call.fields)))
        if keep == Keep.TIES_AT_MAX:
            df = df.drop(_best(call))
    return df

"""The fold rules of merge/algebra.py as Spark Columns: what the VM's aggregates compute.

Why a translator and not rules: every rule is the algebra's; this module only says how Spark spells
it, so the VM folds exactly what the workers fold (merge/polars_fold.py spells the same rules for
polars). Each function takes a call's argument already lowered to a Column (core/spark/lower.py
lowers expressions; the fold code stays free of the query language's Spark backend).

A fold runs over *records* (the query's rows, each lifted into partial form inside the aggregate)
or over *partial rows* (the workers' rows, the VM's records put in partial form by `lifted`, or the
panes of a sliding window). Where Spark has a native aggregate for a rule over records, it is used:
a sum of ones is count(1), a sum of presence flags is count(arg), avg's ratio of sums is avg(arg).

A kind that keeps records has no Spark aggregate here: Spark's nearest one, collect_list, keeps every
record of the group in the state until the window closes. Such an aggregate runs as one operator that
folds in polars (merge/spark/window_fold.py, ADR 0021); its lift here (`lifted`) only gives that
operator the partial form's Spark types.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

from core.errors import PlanError
from core.plan import AggCall
from merge.algebra import (
    ColumnType,
    Combine,
    Finish,
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
    """`call`'s result folded over a group in one aggregate. A call that keeps records has none in
    Spark: it is folded in merge/spark/window_fold.py, which keeps only the kept records."""
    k = kind_of(call)
    if k.keep is not None:
        raise PlanError(f"{call.fn} {call.out!r} has no Spark aggregate", hint="fold it with window_fold")
    if from_records and k.finish == Finish.RATIO:  # Spark's avg: the same ratio, in one aggregate buffer
        return F.avg(arg).alias(call.out)
    parts = [_folded(c, call, arg, from_records) for c in k.columns]
    if k.finish == Finish.RATIO:
        return F.try_divide(*parts).alias(call.out)  # null, not an ANSI error, over no value
    (value,) = parts
    return value.alias(call.out)

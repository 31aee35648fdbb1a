"""The fold rules of merge/algebra.py as polars expressions: what the workers and the fused operators run.

Why a translator and not rules: every rule is the algebra's; this module only says how polars spells
it, vectorised and in one group_by per fold (the worker's partial aggregation, sliding_top_k's pane
fold and fold_per_task are hot paths). Where polars has a cheaper spelling of the same reduction it
uses it: a sum of ones is the group's length, a sum of presence flags is a count.
"""

from __future__ import annotations

from collections.abc import Sequence

import polars as pl

from core.expr_polars import to_polars
from core.plan import AggCall
from merge.algebra import (
    ColumnType,
    Combine,
    Finish,
    Keep,
    Lift,
    PartialColumn,
    kind_of,
    record_head,
    record_order,
)

_TYPES = {ColumnType.INT64: pl.Int64, ColumnType.FLOAT64: pl.Float64}
_ONE_GROUP = "__group"


def _typed(e: pl.Expr, t: ColumnType) -> pl.Expr:
    return e.cast(_TYPES[t]) if t in _TYPES else e


def reduce(combine: Combine, e: pl.Expr) -> pl.Expr:
    """`e`'s values in a group reduced by `combine` (nulls skipped)."""
    match combine:
        case Combine.SUM:
            return e.sum()
        case Combine.SUM_OR_NULL:  # polars' sum of no value is 0, Spark's is null
            return pl.when(e.count() > 0).then(e.sum())
        case Combine.MIN:
            return e.min()
        case Combine.MAX:
            return e.max()


def _from_records(column: PartialColumn, arg: pl.Expr | None) -> pl.Expr:
    """One partial column over a group's records: the combine of their lifts, in one expression."""
    match column.lift:
        case Lift.ONE:  # a sum of ones
            return _typed(pl.len(), column.type)
        case Lift.ARG_PRESENT:  # a sum of presence flags
            assert arg is not None
            return _typed(arg.count(), column.type)
        case Lift.ARG:
            assert arg is not None
            return reduce(column.combine, _typed(arg, column.type))


def _scalars(call: AggCall, from_records: bool) -> list[pl.Expr]:
    """`call`'s scalar partial columns over a group's records, or over its partial rows."""
    arg = to_polars(call.arg) if from_records and call.arg is not None else None
    exprs = []
    for c in kind_of(call).columns:
        folded = _from_records(c, arg) if from_records else reduce(c.combine, pl.col(c.name(call.out)))
        exprs.append(folded.alias(c.name(call.out)))
    return exprs


def record(call: AggCall) -> pl.Expr:
    """One record of a record-keeping `call` as the struct its lists hold."""
    arg = to_polars(call.arg) if call.arg is not None else None
    head = [(arg if src is None else pl.col(src)).alias(f) for f, src in record_head(call)]  # type: ignore[union-attr]
    return pl.struct([*head, *[pl.col(f) for f in call.fields]])


def keep(recs: pl.DataFrame, by: list[str], call: AggCall) -> pl.DataFrame:
    """Reduce a frame of (by..., record struct) rows to one list of kept records per group.

    Frame-level sorts and windows, not list expressions inside a group_by: those crashed polars 2.1
    on exploded struct lists. Within a group, group_by keeps the rows' order, so sorting first and
    taking the head gives the n greatest.
    """
    rec = pl.col(call.out)
    keys = [rec.struct.field(k) for k in record_order(call)]
    if kind_of(call).keep == Keep.TIES_AT_MAX:
        (v,) = keys
        recs = recs.filter(v.is_not_null()).filter(v == v.max().over(by))
    else:
        recs = recs.sort(keys, descending=True, nulls_last=True)
        recs = recs.filter(pl.int_range(pl.len()).over(by) < call.n)
    return recs.group_by(by, maintain_order=True).agg(rec)


def fold(df: pl.DataFrame, by: Sequence[str], calls: Sequence[AggCall], from_records: bool) -> pl.DataFrame:
    """Group `df` by `by` into one partial row per group: scalar columns in one group_by, each record
    list kept by its rule and joined on. `df` holds records, or partial rows when not `from_records`."""
    by = list(by)
    keys = by or [_ONE_GROUP]
    if not by:
        df = df.with_columns(pl.lit(0, dtype=pl.Int8).alias(_ONE_GROUP))
    kept = [c for c in calls if kind_of(c).keep is not None]
    scalars = [e for c in calls if kind_of(c).keep is None for e in _scalars(c, from_records)]
    out = df.group_by(keys).agg(scalars) if scalars else df.select(keys).unique()
    for call in kept:
        recs = df.select([*keys, (record(call) if from_records else pl.col(call.out)).alias(call.out)])
        if isinstance(recs.schema[call.out], pl.List):
            recs = recs.explode(call.out, keep_nulls=False, empty_as_null=False)
        struct_type = recs.schema[call.out]
        out = out.join(keep(recs, keys, call), on=keys, how="left", nulls_equal=True)
        out = out.with_columns(pl.col(call.out).fill_null(pl.lit([], dtype=pl.List(struct_type))))
    return out.drop(_ONE_GROUP) if not by else out


def finish(call: AggCall) -> pl.Expr:
    """`call`'s result from its combined partial columns."""
    k = kind_of(call)
    match k.finish:
        case Finish.VALUE:
            return pl.col(call.out)
        case Finish.RATIO:
            s, n = (pl.col(c.name(call.out)) for c in k.columns)
            return pl.when(n > 0).then(s / n).alias(call.out)
        case Finish.FIELDS:
            fields = pl.struct([pl.element().struct.field(f) for f in call.fields])
            return pl.col(call.out).list.eval(fields).alias(call.out)


def computed_finishes(calls: Sequence[AggCall]) -> list[pl.Expr]:
    """The finishes that compute something (a VALUE partial column is its result already)."""
    return [finish(c) for c in calls if kind_of(c).finish != Finish.VALUE]


US_PER_MS = 1000


def ceil_ms(us: pl.Expr) -> pl.Expr:
    """The first whole millisecond at or after a microsecond instant: a watermark (in ms) at or past
    it is at or past the instant."""
    return -((-us) // US_PER_MS)


def floor_to(us: pl.Expr, step_us: int) -> pl.Expr:
    """The start of the step-aligned pane holding microsecond instant `us`; polars' % takes the
    divisor's sign, so this floors before 1970 too (as Spark's window does)."""
    return us - us % step_us

"""Merge operators on Spark: the workers' results join the VM's own records in one stream.

Why no separate merge state: Spark's aggregate already keeps the window state, checkpoints it and
commits it once per epoch. So the VM's records are put in *partial form* by a stateless projection
(a count of one, a one-record list for max_with_ties), unioned with the partial rows the workers
returned for the same epoch, and the aggregate folds partials instead of records (count becomes a
sum of counts, avg a sum of sums over a sum of counts, max_with_ties the records at the maximum of
all lists). A retried or replayed epoch re-reads the same routed records and the same partials, so
each record lands in the state exactly once. The partial row type is merge/partials.py's.

For a stateless chain the workers return finished rows, and the merge is a plain union.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.errors import PlanError
from core.plan import AggCall, WindowAggregate
from core.spark.expr_spark import to_spark
from merge.partials import WINDOW_START


def _local_partial(call: AggCall) -> list[Column]:
    arg = to_spark(call.arg) if call.arg is not None else None
    match call.fn:
        case "count":
            return [F.lit(1).cast("bigint").alias(call.out)]
        case "sum" | "min" | "max":
            return [arg.alias(call.out)]
        case "avg":
            return [
                arg.cast("double").alias(f"{call.out}__sum"),
                F.when(arg.isNotNull(), F.lit(1))
                .otherwise(F.lit(0))
                .cast("bigint")
                .alias(f"{call.out}__count"),
            ]
        case "max_with_ties":
            return [F.array(F.struct(arg.alias("_v"), *[F.col(f) for f in call.fields])).alias(call.out)]
        case "latest_n":
            keys = [F.col(k).alias(f"_k{i}") for i, k in enumerate(call.order_by)]
            return [F.array(F.struct(*keys, *[F.col(f) for f in call.fields])).alias(call.out)]
    raise PlanError(f"aggregate {call.fn!r} has no partial form")


def _group_columns(op: WindowAggregate) -> list[str]:
    if op.window is None:
        raise PlanError("only an aggregate with its own window merges workers' partials")
    return [op.window.on, *op.keys]


def local_partials(df: DataFrame, op: WindowAggregate) -> DataFrame:
    """The VM's records of `op` in partial form; the event-time column stays a plain column so it
    keeps its watermark."""
    cols: list[Column] = [F.col(c) for c in _group_columns(op)]
    for call in op.aggs:
        cols += _local_partial(call)
    return df.select(*cols)


def worker_partials(df: DataFrame, op: WindowAggregate, like: DataFrame) -> DataFrame:
    """The workers' partial rows as columns of `like`: a pane's rows take its start as event time,
    which assigns them to the same pane and the same windows as the records they summarise."""
    assert op.window is not None
    return align(df.withColumnRenamed(WINDOW_START, op.window.on), like)


def align(df: DataFrame, like: DataFrame) -> DataFrame:
    """`df`'s columns in `like`'s order and types (a cast only where types differ, which would drop
    an event-time column's watermark marker)."""
    types = dict(df.dtypes)
    cols = []
    for field in like.schema.fields:
        if field.name not in types:
            raise PlanError(
                f"the workers' rows lack column {field.name!r}", hint=f"they have {', '.join(types)}"
            )
        c = F.col(field.name)
        cols.append(c if types[field.name] == field.dataType.simpleString() else c.cast(field.dataType))
    return df.select(*cols)


def merge_agg(call: AggCall) -> Column:
    """The aggregate that folds partial rows of `call` (its raw counterpart is in lower.py)."""
    c = F.col(call.out)
    match call.fn:
        case "count" | "sum":
            return F.sum(c)
        case "min":
            return F.min(c)
        case "max":
            return F.max(c)
        case "avg":
            return F.try_divide(F.sum(f"{call.out}__sum"), F.sum(f"{call.out}__count"))
        case "max_with_ties" | "latest_n":
            return F.flatten(F.collect_list(c))
    raise PlanError(f"aggregate {call.fn!r} has no partial form")


def merge_best(call: AggCall) -> Column:
    """max_with_ties' maximum over partial lists, computed as its own aggregate (see lower._trims)."""
    return F.max(F.array_max(F.transform(F.col(call.out), lambda x: x["_v"])))


def merge_pane_aggs(call: AggCall) -> list[Column]:
    """Pane-level aggregates of a sliding window over partial rows (same columns as lower's)."""
    if call.fn == "avg":
        return [
            F.sum(f"{call.out}__sum").alias(f"_{call.out}_s"),
            F.sum(f"{call.out}__count").alias(f"_{call.out}_n"),
        ]
    return [merge_agg(call).alias(call.out)]

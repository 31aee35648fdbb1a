"""Merge operators on Spark: the workers' results join the VM's own records in one stream.

Why no separate merge state: Spark's aggregate already keeps the window state, checkpoints it and
commits it once per epoch. So the VM's records are put in *partial form* by a stateless projection
(a count of one, a one-record list for max_with_ties), unioned with the partial rows the workers
returned for the same epoch, and the aggregate folds partials instead of records (count becomes a
sum of counts, avg a sum of sums over a sum of counts). An aggregate that keeps records
(max_with_ties, latest_n) is folded by merge/spark/window_fold.py's operator instead, whose state
holds only the maximum's ties and the n latest. A retried or replayed epoch re-reads the same
routed records and the same partials, so each record lands in the state exactly once. The partial
row type is merge/partials.py's, and what a record lifts into is merge/algebra.py's rule (spelled
for Spark in merge/spark/column_fold.py).

For a stateless chain the workers return finished rows, and the merge is a plain union.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.errors import PlanError
from core.plan import WindowAggregate
from merge.partials import WINDOW_START
from merge.spark.column_fold import lifted


def _group_columns(op: WindowAggregate) -> list[str]:
    if op.window is None:
        raise PlanError("only an aggregate with its own window merges workers' partials")
    return [op.window.on, *op.keys]


def local_partials(df: DataFrame, op: WindowAggregate, args: Mapping[str, Column | None]) -> DataFrame:
    """The VM's records of `op` in partial form; the event-time column stays a plain column so it
    keeps its watermark. `args` holds each call's argument lowered to a Column, by output name."""
    cols: list[Column] = [F.col(c) for c in _group_columns(op)]
    for call in op.aggs:
        cols += lifted(call, args[call.out])
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

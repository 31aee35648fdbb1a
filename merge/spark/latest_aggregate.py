"""A running aggregate over each key's n latest rows, one output row per input row, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark Q6 averages a seller's last 10 winning bids each time
one of the seller's auctions closes. Spark's append mode has no running aggregate over the latest n,
and a windowed regrouping cuts the seller's history at window boundaries. The step and its state are
merge/latest_step.py's; the operator runs on the keyed processor (merge/spark/keyed_processor.py),
grouped by a bucket of the key's group, so that during a burst the key groups the plan gives the
workers run there (ADR 0028). Its answers carry no event time: it sets timers but emits none.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql.types import StructType

from core.plan import LatestAggregate
from merge.keyed_batch import SealService
from merge.latest_step import LatestStep
from merge.spark.column_fold import finished
from merge.spark.keyed_processor import KeyedOperator, keyed_operator, timestamp_columns


def latest_aggregate(
    df: DataFrame,
    op: LatestAggregate,
    args: Mapping[str, Column | None],
    service: SealService | None = None,
) -> DataFrame:
    """`op` over `df`; `args` holds each call's argument lowered to a Column, by output name. With
    `service`, the key groups the plan gives the workers run there."""
    step = LatestStep.of(op, timestamp_columns(df))
    like = df.groupBy(*op.keys, *op.carry).agg(
        *[finished(a, args[a.out], from_records=True) for a in op.aggs]
    )
    out = StructType([like.schema[c] for c in step.out_columns])
    keyed = KeyedOperator(step, op.keys, (), out, timers=True, by_plan=True)
    return keyed_operator(df.select(*step.read), None, keyed, service=service)

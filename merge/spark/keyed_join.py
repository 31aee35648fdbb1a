"""An unwindowed inner equi-join on the keyed processor, so that workers can hold key groups of it.

Why not Spark's stream-stream join: its state lives in Spark's join operator, which only the VM can
step. Here the state and the step are merge/join_step.py's, run by merge/spark/keyed_processor.py,
which seals the key groups workers hold during a burst (ADR 0024). The state is the same as Spark's
join without a watermark condition: every row of both sides, kept. The join emits no event time,
so it sets no timers.
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from core.plan import WindowJoin
from merge.join_step import JoinStep
from merge.keyed_batch import SealService
from merge.spark.keyed_processor import KeyedOperator, keyed_operator


def keyed_join(
    left: DataFrame,
    right: DataFrame,
    op: WindowJoin,
    receipts: Mapping[str, DataFrame] | None = None,
    service: SealService | None = None,
) -> DataFrame:
    """`op` over its two inputs: each pair once, the left's columns then the right's."""
    out = StructType([*left.schema.fields, *right.schema.fields])
    step = JoinStep.of(op, left.columns, right.columns)
    keyed = KeyedOperator(step, op.left_keys, op.right_keys, out, timers=False)
    return keyed_operator(left, right, keyed, receipts, service)

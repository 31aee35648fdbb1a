"""A window aggregate whose state moves by key group, on the keyed processor: its panes per key.

Why (core/ablations.py): without merge operators, the VM cannot fold workers' partials into an
aggregate's state, so the state itself goes where the key groups run. The aggregate's open panes live
in the keyed processor (merge/spark/keyed_processor.py) under merge/pane_step.py's step. Fed through
the VM (no router), the key groups the current plan gives the workers run there with their panes (ADR
0028); fed by the router's receipts, the groups whose records it sent there do (ADR 0024).
A pane leaves the operator once, folded, when the watermark passes its end, in the partial form the
window assembly after it reads (the fused top-k, or the aggregate's own windows over partials).
"""

from __future__ import annotations

from collections.abc import Mapping

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from core.plan import WindowAggregate
from merge.keyed_batch import SealService
from merge.pane_step import PaneStep
from merge.spark.keyed_processor import KeyedOperator, keyed_operator


def panes_by_key(
    partials: DataFrame,
    op: WindowAggregate,
    service: SealService | None = None,
    receipts: Mapping[str, DataFrame] | None = None,
) -> DataFrame:
    """`partials` (the aggregate's rows in partial form: its event time, keys, partial columns) folded
    per pane and key, each pane emitted once its end is behind the watermark. With `service`, key
    groups run on workers: those whose records the router sent there, as `receipts` (by entity), or
    without receipts those the plan gives the workers."""
    step = PaneStep.of(op)
    out = StructType([partials.schema[c] for c in step.read])
    keyed = KeyedOperator(step, op.keys, (), out, timers=True, event_time=step.on, by_plan=not receipts)
    return keyed_operator(partials.select(*step.read), None, keyed, receipts, service)

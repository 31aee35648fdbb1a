"""A keyed operator on transformWithState: both inputs in one stream, a bucket of key groups a call.

Why one processor for every keyed operator (Q4/Q6's winners at close, Q3's join, an aggregate whose
state moves by key: merge/spark/pane_stage.py): what Spark must do for them is the same. Both sides
are laid out as one input (each side's columns, the other's typed blanks, the side and the key renamed
alike), grouped by a bucket of the key's group: one Python call per bucket and micro-batch, the
bucket's state as one frame per name (merge/spark/frame_state.py). The batch itself is
merge/keyed_batch.py's `run_batch` over the operator's step (merge/keyed_step.py): during a burst, key
groups the workers hold arrive as receipts of records stashed at the agent, and the batch seals them
(ADR 0024); the groups' bookkeeping is checkpointed with the rest of the state. Timestamps cross into
Python as int64 microseconds; the other side's integer columns are zeros, not nulls, so pandas keeps
them int64. Exactly-once comes from Spark: state and timers are checkpointed with the epoch, and a
replayed epoch re-sends the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

import pandas as pd
import polars as pl
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegralType, StructField, StructType, TimestampType

from core.offload_plan import KEY_GROUPS
from merge.keyed_batch import RECEIPT_SIDE, Fetch, SealService, run_batch
from merge.keyed_groups import GROUP, RECEIPT, GroupState
from merge.keyed_step import SIDE, KeyedStep, key_column
from merge.spark.frame_state import FrameValue, NextTimer, input_frame

_BUCKET = "sponge_bucket"  # the group: a bucket of key groups
_HELD = {"group": pl.Int64, "on_workers": pl.Boolean, "version": pl.Int64, "next_due_ms": pl.Int64}


class KeyedProcessor(StatefulProcessor):
    """The state of one bucket of key groups: the VM-held keys' frames, and (with a seal service)
    which groups workers hold."""

    def __init__(
        self,
        step: KeyedStep,
        timestamps: list[str],
        service: SealService | None,
        by_plan: bool = False,
    ) -> None:
        self.step = step
        self.timestamps = timestamps
        self.service = service
        self.by_plan = by_plan
        self.names = [*step.columns, GROUP, *RECEIPT]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.frames = {name: FrameValue(handle, name) for name in self.step.names}
        self.timer = NextTimer(handle, "next_timer")
        self.groups = FrameValue(handle, "groups")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        yield from self._run(input_frame(rows, self.names, self.timestamps), watermark)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._run(None, watermark)

    def _run(self, new: pl.DataFrame | None, watermark_ms: int) -> Iterator[pd.DataFrame]:
        vm = {name: value.get() for name, value in self.frames.items()}
        held = self._held() if self.service is not None else {}
        fetch = self.service.fetch if self.service is not None else Fetch.LAZY
        owned = self.service.owned() if self.service is not None and self.by_plan else frozenset()
        batch = run_batch(self.step, self.service, fetch, vm, held, new, watermark_ms, owned)
        for name, value in self.frames.items():
            frame = batch.state.get(name)
            if frame is not None:
                value.put(frame)
        if self.service is not None:  # without one, no group is ever held elsewhere
            self._keep_held(batch.held)
        self.timer.ensure(batch.next_due_ms, watermark_ms)
        for out in batch.outs:
            yield out.to_pandas()

    def _held(self) -> dict[int, GroupState]:
        frame = self.groups.get()
        if frame is None:
            return {}
        return {
            r["group"]: GroupState(r["on_workers"], r["version"], r["next_due_ms"])
            for r in frame.iter_rows(named=True)
        }

    def _keep_held(self, held: Mapping[int, GroupState]) -> None:
        kept = {g: st for g, st in held.items() if st != GroupState()}
        self.groups.put(
            pl.DataFrame(
                {
                    "group": list(kept),
                    "on_workers": [st.on_workers for st in kept.values()],
                    "version": [st.version for st in kept.values()],
                    "next_due_ms": [st.next_due_ms for st in kept.values()],
                },
                schema=_HELD,
            )
        )

    def close(self) -> None:
        pass


def _blank(field: StructField) -> Column:
    t = "bigint" if isinstance(field.dataType, TimestampType) else field.dataType
    value = F.lit(0) if isinstance(field.dataType, IntegralType | TimestampType) else F.lit(None)
    return value.cast(t).alias(field.name)


def _no_receipt() -> list[Column]:
    return [F.lit("").alias(RECEIPT[0]), *[F.lit(0).cast("bigint").alias(c) for c in RECEIPT[1:]]]


def _staged(df: DataFrame, side: int, keys: tuple[str, ...], other: StructType) -> DataFrame:
    """One side's rows in the operator's input layout; the other side's columns are typed blanks."""

    def own(field) -> Column:  # type: ignore[no-untyped-def]
        c = F.col(field.name)
        return (F.unix_micros(c) if isinstance(field.dataType, TimestampType) else c).alias(field.name)

    mine = [own(f) for f in df.schema.fields]
    blanks = [_blank(f) for f in other.fields]
    group = F.pmod(F.xxhash64(*[F.col(k) for k in keys]), F.lit(KEY_GROUPS)).cast("int").alias(GROUP)
    cols = [F.lit(side).alias(SIDE), *[F.col(k).alias(key_column(i)) for i, k in enumerate(keys)]]
    return df.select(*cols, *(mine + blanks if side == 0 else blanks + mine), group, *_no_receipt())


def _receipts(
    df: DataFrame, entity: str, left: DataFrame, right: DataFrame | None, keys: tuple[str, ...]
) -> DataFrame:
    """A keyed input's receipts (router/keyed_route.py) in the operator's input layout."""
    key_types = [left.schema[k] for k in keys]
    sides = (*left.schema.fields, *(right.schema.fields if right is not None else ()))
    cols = [
        F.lit(RECEIPT_SIDE).alias(SIDE),
        *[_blank(StructField(key_column(i), f.dataType)) for i, f in enumerate(key_types)],
        *[_blank(f) for f in sides],
        F.col(GROUP).cast("int").alias(GROUP),
        F.lit(entity).alias(RECEIPT[0]),
        *[F.col(c).cast("bigint").alias(c) for c in RECEIPT[1:]],
    ]
    return df.select(*cols)


@dataclass(frozen=True)
class KeyedOperator:
    """How Spark runs one keyed operator: its step, its inputs' keys (one input: no right keys), its
    output, whether it sets event-time timers, and the output column whose event time follows the
    watermark (None: none does)."""

    step: KeyedStep
    left_keys: tuple[str, ...]
    right_keys: tuple[str, ...]
    output: StructType
    timers: bool
    event_time: str | None = None
    by_plan: bool = False  # fed through the VM: the plan's key groups run on workers (ADR 0028)


def timestamp_columns(*inputs: DataFrame) -> set[str]:
    return {f.name for df in inputs for f in df.schema.fields if isinstance(f.dataType, TimestampType)}


def keyed_operator(
    left: DataFrame,
    right: DataFrame | None,
    op: KeyedOperator,
    receipts: Mapping[str, DataFrame] | None = None,
    service: SealService | None = None,
) -> DataFrame:
    """`op` over its one or two inputs. With `service`, the key groups workers hold run there: those
    of a stage fed by sources arrive as `receipts` (by entity, ADR 0024), those of a stage fed by
    another operator are the plan's (ADR 0028)."""
    buckets = int(left.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    if right is None:
        both = _staged(left, 0, op.left_keys, StructType([]))
    else:
        both = _staged(left, 0, op.left_keys, right.schema).unionByName(
            _staged(right, 1, op.right_keys, left.schema)
        )
    for entity, df in (receipts or {}).items():
        both = both.unionByName(_receipts(df, entity, left, right, op.left_keys))
    both = both.withColumn(_BUCKET, F.pmod(F.col(GROUP), F.lit(buckets)))
    stamps = sorted(timestamp_columns(left, *([right] if right is not None else [])))
    processor = KeyedProcessor(op.step, stamps, service, op.by_plan)
    return both.groupBy(_BUCKET).transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=op.output,
        outputMode="Append",
        timeMode="EventTime" if op.timers else "None",
        eventTimeColumnName=op.event_time or "",
    )

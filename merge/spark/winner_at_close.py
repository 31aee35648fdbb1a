"""The best right row of each left entity, decided at the entity's close, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark's winning bid of an auction is only known once the
auction closes, and until then any bid with open <= bid time < expires may still win. A windowed join
cannot say that (it cuts an auction's bids at a window boundary and emits before the close), and an
unwindowed stream-stream join keeps every bid forever. Here the state holds, per open entity, its row
and the best right row so far (one row), plus the right rows a later entity could still take (those
not yet behind the watermark); an entity's row is emitted and dropped when the watermark passes its
close. So the state is bounded by the open entities, whatever the run's length.

The input is both sides in one stream, grouped by a bucket of the join key (one Python call per
bucket and micro-batch, the bucket's entities in one frame, merge/spark/frame_state.py). The step
over that frame is merge/winner.py's, which a worker can run over the same state. Timestamps
cross into Python as int64 microseconds; the other side's integer columns are zeros, not nulls, so
pandas keeps them int64. Exactly-once comes from Spark: state and timers are checkpointed with the
epoch, and a replayed epoch re-sends the same rows. The best of the already-best row and a candidate
is idempotent, so a right row offered twice changes nothing.

Rows that Spark's watermark calls late are dropped, as every Spark stateful operator does: an entity
whose close is already behind the watermark when it arrives, a right row no open entity can take and
that no later one could (its time is behind the watermark).
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import IntegralType, StructType, TimestampType

from core.plan import WinnerAtClose
from merge.spark.frame_state import FrameValue, NextTimer, bucket_of, input_frame
from merge.winner import SIDE, Decided, WinnerSpec, WinnerState, expire, key_column, step

_BUCKET = "sponge_bucket"  # the group: a hash bucket of the join key


class WinnerProcessor(StatefulProcessor):
    """The state of one bucket of keys kept in two frames; the step itself is merge/winner.py's."""

    def __init__(self, spec: WinnerSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open = FrameValue(handle, "open")
        self.pending = FrameValue(handle, "pending")
        self.timer = NextTimer(handle, "next_timer")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        watermark = timerValues.getCurrentWatermarkInMs()
        new = input_frame(rows, self.spec.columns, list(self.spec.timestamps))
        yield from self._keep(step(self.spec, self._state(), new, watermark), watermark)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._keep(expire(self.spec, self._state(), watermark), watermark)

    def _state(self) -> WinnerState:
        return WinnerState(self.open.get(), self.pending.get())

    def _keep(self, decided: Decided, watermark_ms: int) -> Iterator[pd.DataFrame]:
        if decided.state.open is not None:
            self.open.put(decided.state.open)
        if decided.state.pending is not None:
            self.pending.put(decided.state.pending)
        self.timer.ensure(decided.next_due_ms, watermark_ms)
        if decided.won is not None and decided.won.height:
            yield decided.won.to_pandas()

    def close(self) -> None:
        pass


def _staged(df: DataFrame, side: int, keys: tuple[str, ...], other: StructType) -> DataFrame:
    """One side's rows in the operator's input layout; the other side's columns are typed blanks."""

    def blank(field) -> Column:  # type: ignore[no-untyped-def]
        t = "bigint" if isinstance(field.dataType, TimestampType) else field.dataType
        value = F.lit(0) if isinstance(field.dataType, IntegralType | TimestampType) else F.lit(None)
        return value.cast(t).alias(field.name)

    def own(field) -> Column:  # type: ignore[no-untyped-def]
        c = F.col(field.name)
        return (F.unix_micros(c) if isinstance(field.dataType, TimestampType) else c).alias(field.name)

    mine = [own(f) for f in df.schema.fields]
    blanks = [blank(f) for f in other.fields]
    cols = [F.lit(side).alias(SIDE), *[F.col(k).alias(key_column(i)) for i, k in enumerate(keys)]]
    return df.select(*cols, *(mine + blanks if side == 0 else blanks + mine))


def winner_at_close(left: DataFrame, right: DataFrame, op: WinnerAtClose) -> DataFrame:
    """`op` over its two inputs: one row per entity that has a winner, its columns then the winner's."""
    timestamps = {
        f.name for f in (*left.schema.fields, *right.schema.fields) if isinstance(f.dataType, TimestampType)
    }
    spec = WinnerSpec.of(op, left.columns, right.columns, timestamps)
    buckets = int(left.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    both = _staged(left, 0, op.left_keys, right.schema).unionByName(
        _staged(right, 1, op.right_keys, left.schema)
    )
    both = both.withColumn(_BUCKET, bucket_of(spec.keys, buckets))
    out = StructType([*left.schema.fields, *right.schema.fields])
    return both.groupBy(_BUCKET).transformWithStateInPandas(
        statefulProcessor=WinnerProcessor(spec),
        outputStructType=out,
        outputMode="Append",
        timeMode="EventTime",
        eventTimeColumnName=op.closes,
    )

"""The best right row of each left entity, decided at the entity's close, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark's winning bid of an auction is only known once the
auction closes, and until then any bid with open <= bid time < expires may still win. A windowed join
cannot say that (it cuts an auction's bids at a window boundary and emits before the close), and an
unwindowed stream-stream join keeps every bid forever. Here the state holds, per open entity, its row
and the best right row so far (one row), plus the right rows a later entity could still take (those
not yet behind the watermark); an entity's row is emitted and dropped when the watermark passes its
close. So the state is bounded by the open entities, whatever the run's length.

The input is both sides in one stream, grouped by a bucket of the join key (one Python call per
bucket and micro-batch, the bucket's entities in one frame, merge/spark/frame_state.py). Timestamps
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
from pyspark.sql.types import IntegralType, StructType, TimestampType

from core.expr import Expr
from core.expr_polars import to_polars
from core.plan import WinnerAtClose
from merge.spark.frame_state import US_PER_MS, FrameValue, NextTimer, bucket_of, ceil_ms, input_frame

_SIDE = "sponge_side"  # 0: a left (entity) row, 1: a right row
_BUCKET = "sponge_bucket"  # the group: a hash bucket of the join key
_LID = "sponge_lid"  # an open entity's number within its bucket
_HAS_BEST = "sponge_has_best"


def _key(i: int) -> str:
    return f"sponge_k{i}"


@dataclass(frozen=True)
class WinnerSpec:
    """What the processor needs, free of Spark objects so it pickles small."""

    n_keys: int
    left: tuple[str, ...]
    right: tuple[str, ...]
    timestamps: tuple[str, ...]
    opens: str
    closes: str
    at: str
    by: str
    condition: Expr | None

    @property
    def keys(self) -> list[str]:
        return [_key(i) for i in range(self.n_keys)]

    @property
    def columns(self) -> list[str]:
        return [_SIDE, *self.keys, *self.left, *self.right]

    def offer(self, open_: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
        """Each open entity's best right row after seeing `candidates` (right rows of its bucket)."""
        if open_.height == 0 or candidates.height == 0:
            return open_
        pairs = open_.select(_LID, *self.keys, *self.left).join(candidates, on=self.keys, how="inner")
        inside = (pl.col(self.opens) <= pl.col(self.at)) & (pl.col(self.at) < pl.col(self.closes))
        if self.condition is not None:
            inside = inside & to_polars(self.condition)
        pairs = pairs.filter(inside)
        if pairs.height == 0:
            return open_
        held = open_.filter(pl.col(_HAS_BEST)).select(_LID, *self.right)
        rest = [c for c in self.right if c not in (self.by, self.at)]
        best = (
            pl.concat([held, pairs.select(_LID, *self.right)], how="vertical_relaxed")
            .sort([self.by, self.at, *rest], descending=[True, False] + [False] * len(rest), nulls_last=True)
            .unique(_LID, keep="first", maintain_order=True)
            .with_columns(pl.lit(True).alias(_HAS_BEST))
        )
        return (
            open_.drop(*self.right, _HAS_BEST)
            .join(best, on=_LID, how="left")
            .with_columns(pl.col(_HAS_BEST).fill_null(False))
        )


class WinnerProcessor(StatefulProcessor):
    def __init__(self, spec: WinnerSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.open = FrameValue(handle, "open")
        self.pending = FrameValue(handle, "pending")
        self.timer = NextTimer(handle, "next_timer")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        s = self.spec
        watermark = timerValues.getCurrentWatermarkInMs()
        new = input_frame(rows, s.columns, list(s.timestamps))
        lefts = new.filter(pl.col(_SIDE) == 0).select(*s.keys, *s.left)
        lefts = lefts.drop_nulls([*s.keys, s.opens, s.closes]).filter(
            ceil_ms(pl.col(s.closes).dt.epoch("us")) > watermark
        )
        rights = new.filter(pl.col(_SIDE) == 1).select(*s.keys, *s.right).drop_nulls([*s.keys, s.at, s.by])
        open_ = self._open(new)
        if lefts.height:
            first = (open_[_LID].max() + 1) if open_.height else 0  # type: ignore[operator]
            added = lefts.with_row_index(_LID, offset=first).with_columns(
                pl.col(_LID).cast(pl.Int64),
                *[pl.lit(None, dtype=new.schema[c]).alias(c) for c in s.right],
                pl.lit(False).alias(_HAS_BEST),
            )
            open_ = pl.concat([open_, added.select(open_.columns)], how="vertical_relaxed")
        held = self.pending.get()
        candidates = rights if held is None else pl.concat([held, rights], how="vertical_relaxed")
        open_ = s.offer(open_, candidates)
        yield from self._close(open_, candidates, watermark)

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._close(self.open.get(), self.pending.get(), watermark)

    def _open(self, like: pl.DataFrame) -> pl.DataFrame:
        got = self.open.get()
        if got is not None:
            return got
        s = self.spec
        columns = {c: like.schema[c] for c in (*s.keys, *s.left, *s.right)}
        return pl.DataFrame(schema={_LID: pl.Int64, **columns, _HAS_BEST: pl.Boolean})

    def _close(
        self, open_: pl.DataFrame | None, pending: pl.DataFrame | None, watermark_ms: int
    ) -> Iterator[pd.DataFrame]:
        """Emit the entities whose close the watermark has passed, keep the rest and the right rows a
        later entity could still take, and set the next timer."""
        s = self.spec
        due_at = ceil_ms(pl.col(s.closes).dt.epoch("us"))
        at_us = pl.col(s.at).dt.epoch("us")
        nexts = []
        if open_ is not None:
            won = open_.filter((due_at <= watermark_ms) & pl.col(_HAS_BEST)).select(*s.left, *s.right)
            if won.height:
                yield won.to_pandas()
            open_ = open_.filter(due_at > watermark_ms)
            self.open.put(open_)
            if open_.height:
                nexts.append(int(open_.select(due_at.min()).item()))
        if pending is not None:
            pending = pending.filter(at_us >= watermark_ms * US_PER_MS)
            self.pending.put(pending)
            if pending.height:
                nexts.append(int(pending.select(at_us.max()).item()) // US_PER_MS + 1)
        self.timer.ensure(min(nexts) if nexts else None, watermark_ms)

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
    cols = [F.lit(side).alias(_SIDE), *[F.col(k).alias(_key(i)) for i, k in enumerate(keys)]]
    return df.select(*cols, *(mine + blanks if side == 0 else blanks + mine))


def winner_at_close(left: DataFrame, right: DataFrame, op: WinnerAtClose) -> DataFrame:
    """`op` over its two inputs: one row per entity that has a winner, its columns then the winner's."""
    timestamps = tuple(
        f.name for f in (*left.schema.fields, *right.schema.fields) if isinstance(f.dataType, TimestampType)
    )
    spec = WinnerSpec(
        len(op.left_keys),
        tuple(left.columns),
        tuple(right.columns),
        timestamps,
        op.opens,
        op.closes,
        op.at,
        op.by,
        op.condition,
    )
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

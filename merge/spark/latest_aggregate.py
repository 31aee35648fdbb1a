"""A running aggregate over each key's n latest rows, one output row per input row, on transformWithState.

Why an operator of its own (ADR 0020): NEXMark Q6 averages a seller's last 10 winning bids each time
one of the seller's auctions closes. Spark's append mode has no running aggregate over the latest n,
and a windowed regrouping cuts the seller's history at window boundaries. Here the state holds, per
key, only the n rows the keep rule of `latest_n` keeps (merge/algebra.py GREATEST_N, spelled by
merge/polars_fold.py), plus the input rows the watermark has not reached yet. A row is answered when
the watermark reaches its event time `at`, together with every row of the same instant, so the
answer does not depend on how rows were cut into micro-batches: the aggregates over the n greatest
rows by `order_by` among the key's rows whose `at` is not after its own.

Grouping is by a hash bucket of the key (one Python call per bucket and micro-batch,
merge/spark/frame_state.py); the bucket's keys are answered with vectorised polars.
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
from pyspark.sql.types import StructType, TimestampType

from core.plan import AggCall, LatestAggregate
from merge import polars_fold
from merge.spark.column_fold import finished
from merge.spark.frame_state import FrameValue, NextTimer, bucket_of, input_frame

_BUCKET = "sponge_bucket"
_RID = "sponge_rid"  # a due row's number within the micro-batch
_EARLIER = "sponge_earlier"  # a kept row: answered in an earlier micro-batch
_LATEST = "sponge_latest"


@dataclass(frozen=True)
class LatestSpec:
    """What the processor needs, free of Spark objects so it pickles small."""

    op: LatestAggregate
    columns: tuple[str, ...]  # the input columns, in order
    fields: tuple[str, ...]  # the columns the aggregates read, other than the order keys
    timestamps: tuple[str, ...]

    @property
    def keep_call(self) -> AggCall:
        """The keep rule as merge/algebra.py states it: latest_n over the kept columns."""
        return AggCall(_LATEST, "latest_n", fields=self.fields, n=self.op.n, order_by=self.op.order_by)

    @property
    def kept_columns(self) -> list[str]:
        return [*self.op.keys, *self.op.order_by, *self.fields]

    def latest(self, rows: pl.DataFrame, by: list[str]) -> pl.DataFrame:
        """The n greatest of `rows` per `by`, by the order keys (then the fields), as plain columns."""
        call = self.keep_call
        recs = rows.select(*by, polars_fold.record(call).alias(call.out))
        kept = polars_fold.keep(recs, by, call).explode(call.out).unnest(call.out)
        return kept.rename({f"_k{i}": c for i, c in enumerate(self.op.order_by)})

    def answer(self, kept: pl.DataFrame, due: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
        """The output rows of `due` (rows whose instant the watermark has reached) and the new kept rows."""
        op = self.op
        due = due.with_row_index(_RID)
        rows = due.select(*self.kept_columns, op.at)
        earlier = kept.with_columns(pl.lit(None, dtype=rows.schema[op.at]).alias(op.at))
        candidates = pl.concat([earlier, rows], how="vertical_relaxed").rename({op.at: "sponge_cand_at"})
        pairs = due.select(_RID, *op.keys, op.at).join(
            candidates, on=list(op.keys), how="inner", nulls_equal=True
        )
        pairs = pairs.filter(pl.col("sponge_cand_at").is_null() | (pl.col("sponge_cand_at") <= pl.col(op.at)))
        folded = polars_fold.fold(self.latest(pairs, [_RID]), [_RID], op.aggs, from_records=True)
        folded = folded.with_columns(polars_fold.computed_finishes(op.aggs))
        out = due.select(_RID, *op.keys, *op.carry).join(
            folded.select(_RID, *[a.out for a in op.aggs]), on=_RID
        )
        new_kept = self.latest(pl.concat([kept, rows.drop(op.at)], how="vertical_relaxed"), list(op.keys))
        return out.sort(_RID).drop(_RID), new_kept.select(self.kept_columns)


class LatestProcessor(StatefulProcessor):
    def __init__(self, spec: LatestSpec) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.kept = FrameValue(handle, "kept")
        self.waiting = FrameValue(handle, "waiting")
        self.timer = NextTimer(handle, "next_timer")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        new = input_frame(rows, list(self.spec.columns), list(self.spec.timestamps))
        held = self.waiting.get()
        waiting = new if held is None else pl.concat([held, new], how="vertical_relaxed")
        yield from self._answer(waiting, timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        waiting = self.waiting.get()
        if waiting is not None:
            watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
            yield from self._answer(waiting, watermark)

    def _answer(self, waiting: pl.DataFrame, watermark_ms: int) -> Iterator[pd.DataFrame]:
        at = self.spec.op.at
        due_at = polars_fold.ceil_ms(pl.col(at).dt.epoch("us"))
        due = waiting.filter(due_at <= watermark_ms)
        waiting = waiting.filter(due_at > watermark_ms)
        if due.height:
            kept = self.kept.get()
            if kept is None:
                kept = due.select(self.spec.kept_columns).clear()
            out, kept = self.spec.answer(kept, due)
            self.kept.put(kept)
            if out.height:
                yield out.to_pandas()
        self.waiting.put(waiting)
        if waiting.height:
            self.timer.ensure(int(waiting.select(due_at.min()).item()), watermark_ms)

    def close(self) -> None:
        pass


def latest_aggregate(df: DataFrame, op: LatestAggregate, args: Mapping[str, Column | None]) -> DataFrame:
    """`op` over `df`; `args` holds each call's argument lowered to a Column, by output name."""
    read = sorted({c for a in op.aggs if a.arg is not None for c in a.arg.columns()})
    fields = tuple(c for c in read if c not in op.order_by)
    columns = tuple(dict.fromkeys((*op.keys, op.at, *op.order_by, *op.carry, *fields)))
    timestamps = tuple(c for c in columns if isinstance(df.schema[c].dataType, TimestampType))
    spec = LatestSpec(op, columns, fields, timestamps)
    like = df.groupBy(*op.keys, *op.carry).agg(
        *[finished(a, args[a.out], from_records=True) for a in op.aggs]
    )
    out = StructType([like.schema[c] for c in (*op.keys, *op.carry, *[a.out for a in op.aggs])])
    buckets = int(df.sparkSession.conf.get("spark.sql.shuffle.partitions") or "1")
    staged = df.select(
        *[(F.unix_micros(F.col(c)) if c in timestamps else F.col(c)).alias(c) for c in columns],
        bucket_of(op.keys, buckets).alias(_BUCKET),
    )
    return staged.groupBy(_BUCKET).transformWithStateInPandas(
        statefulProcessor=LatestProcessor(spec),
        outputStructType=out,
        outputMode="Append",
        timeMode="EventTime",
    )

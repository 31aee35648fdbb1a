"""A tumbling-window equi-join whose only reader counts its pairs per group, run as one stateful operator.

Why (ADR 0015): Spark lowers Q8's join as a symmetric hash join, which keeps each side's rows in two
state stores per partition and scans them at every epoch to evict, followed by a streaming aggregate
with its own store. On one VM core those steps were most of a Q8 epoch's fixed cost, offloaded or
not. Here each epoch's rows of both sides are counted per (window, join key, the side's grouping
columns) into one Arrow blob per window. When the watermark passes a window's end, its two sides are
joined once, in polars, and the pairs are counted per group: the count the aggregate would have taken
over the joined rows. The counting is the count aggregate's fold rule (merge/algebra.py): a row lifts
to one, counts combine by their reduction, and a pair of rows standing for n and m rows stands for
n*m joined rows. No per-task fold runs before the shuffle (unlike sliding_top_k's): Q8's rows
are persons and auctions, under a tenth of the events, and a second Python step per source task
cost a routed epoch more than the fold saved (1.85 s against 1.29 s, measured).

Workers count the sides of their share of the records the same way (merge/join_count.py, ADR 0022),
and their counts enter the operator beside the VM's rows: a pair's count is the product of its two
sides' counts wherever they were taken.

The operator is Spark's transformWithState (Python flavour) and needs the RocksDB state store.
Exactly-once comes from Spark: state and timers are checkpointed with the epoch, and a replayed epoch
re-sends the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pandas as pd
import polars as pl
from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructField, StructType

from core.plan import WINDOW, AggCall, WindowAggregate, WindowJoin
from merge.join_count import SIDE, WINDOW_US, JoinCount, JoinSide, N
from merge.partials import WINDOW_START
from merge.spark.column_fold import lifted
from merge.spark.window_blobs import WindowBlobs, input_rows

# The operator's input, read by position: JoinCount.columns, then _GROUP.
_GROUP = "sponge_group"  # the constant grouping key: the windows of all keys live in one state
_MS = 1000


class JoinCountProcessor(StatefulProcessor):
    """Folds both sides' rows into their window's blob and counts the window's pairs once it closes."""

    def __init__(self, spec: JoinCount) -> None:
        self.spec = spec

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.windows = WindowBlobs(handle, "windows", "done_until")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        new = input_rows(rows, list(self.spec.columns))
        done = self.windows.done()
        if done is not None:  # late: its window has been counted already
            new = new.filter(pl.col(WINDOW_US) // _MS + self.spec.size_ms > done)
        for start_ms in self.windows.add(new, WINDOW_US, self.spec.fold):
            self.handle.registerTimer(start_ms + self.spec.size_ms)
        yield from self._count_closed(timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._count_closed(watermark)

    def _count_closed(self, watermark_ms: int) -> Iterator[pd.DataFrame]:
        closed = [s for s in self.windows.starts() if s + self.spec.size_ms <= watermark_ms]
        for start in closed:
            out = self.spec.pairs(self.windows.get(start), start)
            if out.height:
                yield out.to_pandas()
            self.windows.remove(start)
        if closed:
            self.windows.mark_done(closed[-1] + self.spec.size_ms)

    def close(self) -> None:
        pass


def _side(df: DataFrame, side: JoinSide) -> DataFrame:
    """The VM's rows of one side, each standing for itself: the operator's input columns."""
    micros = F.unix_micros(F.col(side.on))
    return df.select(
        F.lit(side.side).alias(SIDE),
        (micros - F.pmod(micros, F.lit(side.size_s * _MS * _MS))).alias(WINDOW_US),
        *[F.col(k).alias(n) for k, n in zip(side.keys, side.names, strict=True)],
        *side.columns,
        *lifted(AggCall(N, "count"), None),
    )


def _counted_by_workers(workers: DataFrame, like: DataFrame) -> DataFrame:
    """The workers' side counts (JoinSide.counts) as columns of `like`: the window's start becomes
    the operator's microseconds, and the other side's columns are null."""
    rows = workers.withColumn(WINDOW_US, F.unix_micros(F.col(WINDOW_START)))
    cols = [
        (F.col(f.name) if f.name in rows.columns else F.lit(None)).cast(f.dataType).alias(f.name)
        for f in like.schema.fields
    ]
    return rows.select(*cols)


def join_count(
    left: DataFrame,
    right: DataFrame,
    join: WindowJoin,
    agg: WindowAggregate,
    agg_like: DataFrame,
    workers: Sequence[DataFrame] = (),
) -> DataFrame:
    """`agg` over `join` of `left` and `right`, plus the `workers`' counts of either side's offloaded
    rows. `agg_like` is the native lowering of the pair (never run): the output takes its columns
    and types."""
    assert join.window is not None
    sides = (JoinSide.of(join, agg, 0, left.columns), JoinSide.of(join, agg, 1, right.columns))
    spec = JoinCount.of(*sides, agg)
    frames = [_side(df, side) for df, side in zip((left, right), sides, strict=True)]
    both = frames[0].unionByName(frames[1], allowMissingColumns=True).select(*spec.columns)
    for counted_ in workers:
        both = both.unionByName(_counted_by_workers(counted_, both))
    both = both.withColumn(_GROUP, F.lit(0))
    out_fields = [
        StructField("window_start", agg_like.schema[WINDOW].dataType["start"].dataType),  # type: ignore[index]
        StructField("window_end", agg_like.schema[WINDOW].dataType["end"].dataType),  # type: ignore[index]
        *[agg_like.schema[c] for c in (*spec.group, *spec.outs)],
    ]
    counted = both.groupBy(_GROUP).transformWithStateInPandas(
        statefulProcessor=JoinCountProcessor(spec),
        outputStructType=StructType(out_fields),
        outputMode="Append",
        timeMode="EventTime",
    )
    window = F.struct(F.col("window_start").alias("start"), F.col("window_end").alias("end"))
    return counted.select(window.alias(WINDOW), *[c for c in agg_like.columns if c != WINDOW])

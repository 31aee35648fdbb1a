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

The operator is Spark's transformWithState (Python flavour) and needs the RocksDB state store.
Exactly-once comes from Spark: state and timers are checkpointed with the epoch, and a replayed epoch
re-sends the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

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
from merge import polars_fold
from merge.algebra import kind
from merge.spark.column_fold import lifted
from merge.spark.window_blobs import WindowBlobs, input_rows

# The operator's input, read by position (the pandas hand-off renames "_"-prefixed columns):
# [_SIDE, _WINDOW_US, *join keys (the left side's names), *left columns, *right columns, _N, _GROUP].
_SIDE = "sponge_side"  # 0 for the left input, 1 for the right
_WINDOW_US = "sponge_window_us"  # the row's window start, microseconds since the epoch
_N = "sponge_n"  # how many input rows the row stands for
_GROUP = "sponge_group"  # the constant grouping key: the windows of all keys live in one state
_MS = 1000
(_COUNT,) = kind("count").columns


def _counted(e: pl.Expr) -> pl.Expr:
    """Counts (of rows, of pairs) combined by the count aggregate's reduction."""
    return polars_fold.reduce(_COUNT.combine, e)


@dataclass(frozen=True)
class JoinCount:
    """What the processor needs to know, kept free of Spark objects so it pickles small."""

    size_ms: int
    keys: tuple[str, ...]  # the join keys, under the left side's names
    left: tuple[str, ...]  # the left columns the count groups by
    right: tuple[str, ...]  # the right columns the count groups by
    group: tuple[str, ...]  # the aggregate's keys other than the window, in their order
    outs: tuple[str, ...]  # the aggregate's count columns

    @property
    def columns(self) -> tuple[str, ...]:
        return (_SIDE, _WINDOW_US, *self.keys, *self.left, *self.right, _N)

    def fold(self, rows: pl.DataFrame) -> pl.DataFrame:
        """One row per (side, key, side columns) of one window, counting the rows it stands for."""
        by = [c for c in self.columns if c not in (_WINDOW_US, _N)]
        return rows.group_by(by).agg(_counted(pl.col(_N)))

    def pairs(self, rows: pl.DataFrame, start_ms: int) -> pl.DataFrame:
        """The window starting at `start_ms`: its pairs counted per group (nulls never join, as in Spark)."""
        left = rows.filter(pl.col(_SIDE) == 0).select(*self.keys, *self.left, pl.col(_N).alias("_l"))
        right = rows.filter(pl.col(_SIDE) == 1).select(*self.keys, *self.right, pl.col(_N).alias("_r"))
        joined = left.join(right, on=list(self.keys), how="inner")
        counted = joined.group_by(list(self.group)).agg(_counted(pl.col("_l") * pl.col("_r")).alias("_pairs"))
        start = pl.lit(start_ms, pl.Int64) * _MS
        return counted.select(
            start.cast(pl.Datetime("us", "UTC")).alias("window_start"),
            (start + self.size_ms * _MS).cast(pl.Datetime("us", "UTC")).alias("window_end"),
            *self.group,
            *[pl.col("_pairs").alias(out) for out in self.outs],
        )


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
            new = new.filter(pl.col(_WINDOW_US) // _MS + self.spec.size_ms > done)
        for start_ms in self.windows.add(new, _WINDOW_US, self.spec.fold):
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


def fusable(join: WindowJoin, agg: WindowAggregate) -> bool:
    """Whether `join -> key_by(agg.keys) -> agg` can run as one operator: a tumbling-window equi-join
    without a residual condition, counted per group that includes the window."""
    return (
        join.window is not None
        and join.window.tumbling
        and join.condition is None
        and agg.window is None
        and WINDOW in agg.keys
        and all(a.fn == "count" and a.arg is None for a in agg.aggs)
    )


def _side(df: DataFrame, side: int, on: str, size_ms: int, keys: list[str], names: list[str]) -> DataFrame:
    micros = F.unix_micros(F.col(on))
    return df.select(
        F.lit(side).alias(_SIDE),
        (micros - F.pmod(micros, F.lit(size_ms * _MS))).alias(_WINDOW_US),
        *[F.col(k).alias(n) for k, n in zip(keys, names, strict=True)],
        *[c for c in df.columns if c not in keys and c != on],
        *lifted(AggCall(_N, "count"), None),
    )


def join_count(
    left: DataFrame, right: DataFrame, join: WindowJoin, agg: WindowAggregate, agg_like: DataFrame
) -> DataFrame:
    """`agg` over `join` of `left` and `right`. `agg_like` is the native lowering of the pair (never
    run): the output takes its columns and types."""
    assert join.window is not None and fusable(join, agg)
    size_ms = join.window.size_s * 1000
    group = tuple(k for k in agg.keys if k != WINDOW)
    keys = list(join.left_keys)
    left_cols = tuple(c for c in group if c in left.columns and c not in keys)
    right_cols = tuple(
        c for c in group if c in right.columns and c not in join.right_keys and c not in left_cols
    )
    spec = JoinCount(size_ms, tuple(keys), left_cols, right_cols, group, tuple(a.out for a in agg.aggs))
    sides = [
        _side(left.select(join.window.on, *keys, *left_cols), 0, join.window.on, size_ms, keys, keys),
        _side(
            right.select(join.right_window_on, *join.right_keys, *right_cols),
            1,
            join.right_window_on,
            size_ms,
            list(join.right_keys),
            keys,
        ),
    ]
    both = sides[0].unionByName(sides[1], allowMissingColumns=True).select(*spec.columns)
    both = both.withColumn(_GROUP, F.lit(0))
    out_fields = [
        StructField("window_start", agg_like.schema[WINDOW].dataType["start"].dataType),  # type: ignore[index]
        StructField("window_end", agg_like.schema[WINDOW].dataType["end"].dataType),  # type: ignore[index]
        *[agg_like.schema[c] for c in (*group, *spec.outs)],
    ]
    counted = both.groupBy(_GROUP).transformWithStateInPandas(
        statefulProcessor=JoinCountProcessor(spec),
        outputStructType=StructType(out_fields),
        outputMode="Append",
        timeMode="EventTime",
    )
    window = F.struct(F.col("window_start").alias("start"), F.col("window_end").alias("end"))
    return counted.select(window.alias(WINDOW), *[c for c in agg_like.columns if c != WINDOW])

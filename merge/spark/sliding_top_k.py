"""A sliding-window aggregate that feeds a per-window top-k, run as one stateful operator over panes.

Why (ADR 0010, 0014): lowered natively, the window step adds every pane partial to each of the
size/slide windows that contain it (Q5: five state updates per (auction, pane)) and the top-k step
collects each closed window's rows once more. Even Spark's own pane step (a streaming aggregate over
a tumbling window of the slide) cost a Q5 epoch ~0.7 s of its ~2 s on one core: a RocksDB update per
(pane, auction) and a scan of the whole store per epoch to evict. So this operator takes the rows in
partial form, unaggregated (the VM's records as partials of one record, the workers' partials as
they came), folds each epoch's rows into its pane with polars, keeps the pane as one Arrow IPC blob,
and when the watermark closes a window sums its panes once, vectorised, and ranks them.

The operator is Spark's transformWithState (Python flavour), the arbitrary-state operator that may
follow an aggregation in append mode; it needs the RocksDB state store (session.ROCKSDB_STATE_STORE).
Panes are kept per grouping key (the top-k's partition) in a map keyed by the pane's start;
event-time timers at window ends fire the ranking. Exactly-once comes from Spark: the state and the
timers are checkpointed with the epoch, and a replayed epoch re-sends the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator

import pandas as pd
import polars as pl
import pyarrow as pa
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.pandas.types import to_arrow_schema
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)
from pyspark.sql.types import StructField, StructType

from core.plan import WINDOW, TopK, WindowAggregate
from merge.sliding_top_k import Ranker, SlidingTopK, fold_to_panes
from merge.spark.window_blobs import WindowBlobs, input_rows

# The operator's input is [_PANE_US, *values, group] and is read by position: the pandas hand-off
# renames "_"-prefixed columns to "_<i>". No event-time column goes in: the timers follow the query's
# watermark, and a timestamp column costs the pandas hand-off more than all the rest (measured: plain
# Q5 epochs of 140,000 rows 1.4 s without it, 2.0 s with it).
_PANE_US = "sponge_pane_us"  # the start of the row's pane in microseconds since the epoch
_GROUP = "sponge_group"  # the constant grouping key of an unpartitioned top-k
_MS = 1000


class PaneProcessor(StatefulProcessor):
    """Folds a partition's rows into its panes, keeps each pane until no open window needs it, and
    ranks windows as they close."""

    def __init__(self, spec: SlidingTopK, ranker: Ranker | None = None) -> None:
        self.spec = spec
        self.ranker = ranker

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.panes = WindowBlobs(handle, "panes", "ranked_until")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        new = input_rows(rows, [_PANE_US, *self.spec.columns])
        done = self.panes.done()
        if done is not None:  # late: the pane's first window is ranked, so the watermark passed its end
            new = new.filter(pl.col(_PANE_US) // _MS + self.spec.slide_ms > done)
        for pane_ms in self.panes.add(new, _PANE_US, self.spec.fold):
            for end in self.spec.window_ends(pane_ms):
                if done is None or end > done:
                    self.handle.registerTimer(end)
        yield from self._rank_closed(timerValues.getCurrentWatermarkInMs())

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        watermark = max(timerValues.getCurrentWatermarkInMs(), expiredTimerInfo.getExpiryTimeInMs())
        yield from self._rank_closed(watermark)

    def _rank_closed(self, watermark_ms: int) -> Iterator[pd.DataFrame]:
        """Rank every window that holds a pane, ends by the watermark and is not ranked yet."""
        done = self.panes.done()
        starts = self.panes.starts()
        ends = sorted(
            {
                e
                for p in starts
                for e in self.spec.window_ends(p)
                if e <= watermark_ms and (done is None or e > done)
            }
        )
        if not ends:
            return
        loaded: dict[int, pl.DataFrame] = {}
        for end in ends:
            inside = [p for p in starts if end - self.spec.size_ms <= p < end]
            for p in inside:
                if p not in loaded:
                    loaded[p] = self.panes.get(p)
            panes = pl.concat([loaded[p] for p in inside], how="vertical_relaxed")
            ranked = self.ranker.ranked(panes, end) if self.ranker is not None else None
            out = self.spec.rank(panes, end, ranked)
            if out.height:
                yield out.to_pandas()
        done = ends[-1]
        self.panes.mark_done(done)
        for p in starts:
            if p + self.spec.size_ms <= done:  # every window holding it has been ranked
                self.panes.remove(p)

    def close(self) -> None:
        pass


def fold_per_task(partials: DataFrame, agg: WindowAggregate) -> DataFrame:
    """`partials` folded per (pane, key) within each task, before any shuffle: Spark's map-side
    partial aggregate, which keeps the per-record work parallel over the VM's cores (the operator
    itself runs in one task per top-k partition). A folded row takes its pane's start as event time,
    as the workers' partials do. The workers' rows need no second fold: they come folded per chunk."""
    schema = to_arrow_schema(partials.schema, timezone="UTC")  # the zone is only a label on UTC micros

    def fold(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        frames = [pl.from_arrow(b) for b in batches if b.num_rows]
        if not frames:
            return
        folded = fold_to_panes(pl.concat(frames, how="vertical_relaxed"), agg)  # type: ignore[arg-type]
        yield from folded.select(schema.names).to_arrow().cast(schema).to_batches()

    return partials.mapInArrow(fold, partials.schema)


def sliding_top_k(
    partials: DataFrame,
    agg: WindowAggregate,
    top: TopK,
    window_like: DataFrame,
    ranker: Ranker | None = None,
) -> DataFrame:
    """The top-k rows of every sliding window of `agg`, from rows in partial form: the event-time
    column, the keys and the partial columns of merge/spark/partial_form.py (a record's or the workers').

    `window_like` is the native window steps over the same rows (never run): the output takes its
    columns and types, so the fused plan writes exactly what the unfused one would. With `ranker`,
    workers rank the closed windows' key groups while the plan offloads (ADR 0029).
    """
    assert agg.window is not None
    on = agg.window.on
    values = [c for c in partials.columns if c != on]
    spec = SlidingTopK.of(agg, top, tuple(values))
    group: list[Column] = [F.col(k) for k in top.partition_by] or [F.lit(0).alias(_GROUP)]
    micros = F.unix_micros(F.col(on))
    staged = partials.select(
        (micros - F.pmod(micros, F.lit(spec.slide_ms * _MS))).alias(_PANE_US),  # as F.window's start
        *[F.col(c) for c in values],
        *([] if top.partition_by else group),
    )
    out_fields = [
        StructField("window_start", window_like.schema[WINDOW].dataType["start"].dataType),  # type: ignore[index]
        StructField("window_end", window_like.schema[WINDOW].dataType["end"].dataType),  # type: ignore[index]
        *[window_like.schema[c] for c in (*agg.keys, *[a.out for a in agg.aggs])],
    ]
    ranked = staged.groupBy(*(top.partition_by or (_GROUP,))).transformWithStateInPandas(
        statefulProcessor=PaneProcessor(spec, ranker),
        outputStructType=StructType(out_fields),
        outputMode="Append",
        timeMode="EventTime",
    )
    window = F.struct(F.col("window_start").alias("start"), F.col("window_end").alias("end"))
    return ranked.select(window.alias(WINDOW), *[c for c in window_like.columns if c != WINDOW])

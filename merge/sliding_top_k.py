"""A sliding-window aggregate feeding a per-window top-k, as one step over panes: free of Spark.

Why apart from the Spark operator (merge/spark/sliding_top_k.py, ADR 0010, 0014): the VM's operator
and a worker ranking key groups of a closed window (ADR 0029) run the same fold and the same rank,
and a worker cannot import Spark.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import polars as pl

from core.fusions import keyed_pairs
from core.plan import AggCall, LogicalPlan, TopK, WindowAggregate
from merge import polars_fold
from merge.algebra import kind_of

_MS = 1000


class Ranker(Protocol):
    """Workers ranking a closed window's keys by key group (router/rank_service.py): picklable."""

    def ranked(self, panes: pl.DataFrame, end_ms: int) -> pl.DataFrame | None:
        """The candidates workers return for the keys of `panes` (the window ending at `end_ms`), or
        None when the current plan offloads nothing (the VM ranks)."""
        ...


@dataclass(frozen=True)
class SlidingTopK:
    """What the processor needs to know, kept free of Spark objects so it pickles small."""

    size_ms: int
    slide_ms: int
    keys: tuple[str, ...]  # the aggregate's keys
    aggs: tuple[AggCall, ...]
    k: int
    by: str
    columns: tuple[str, ...]  # the keys and partial columns, as they reach the processor

    @classmethod
    def of(cls, agg: WindowAggregate, top: TopK, columns: tuple[str, ...] = ()) -> SlidingTopK:
        """The fused pair's spec; `columns`: the keys and partial columns as they reach the VM's
        operator (a worker ranking parts of a window needs none)."""
        assert agg.window is not None
        size, slide = agg.window.size_s * _MS, agg.window.slide_s * _MS
        return cls(size, slide, agg.keys, agg.aggs, top.k, top.by, columns)

    def window_ends(self, pane_ms: int) -> range:
        """Ends of the windows that contain the pane starting at `pane_ms` (windows are slide-aligned)."""
        return range(pane_ms + self.slide_ms, pane_ms + self.size_ms + 1, self.slide_ms)

    def fold(self, partials: pl.DataFrame) -> pl.DataFrame:
        """One partial row per key from any number (merge/spark/partial_form.py's partial form)."""
        return polars_fold.fold(partials, self.keys, self.aggs, from_records=False)

    def candidates(self, panes: pl.DataFrame) -> pl.DataFrame:
        """The top k, ties kept, of the keys in `panes` (partial rows of one window's panes): their
        finished rows (keys, then the aggregates). For keys split into parts, the top k of the union
        of each part's candidates is the top k of the whole (the k-th value of a part is no greater
        than the whole's), which is how workers rank key groups of a window (ADR 0029)."""
        return self.top(self.fold(panes).with_columns(*polars_fold.computed_finishes(self.aggs)))

    def top(self, finished: pl.DataFrame) -> pl.DataFrame:
        """The rows of `finished` (one per key) whose `by` is at least the k-th largest: ties at the
        k-th value are kept and a null ranks last, as the native lowering does (lower._top_k)."""
        finished = finished.select(*self.keys, *[a.out for a in self.aggs])
        ranked = finished.get_column(self.by).sort(descending=True, nulls_last=True)
        if ranked.len() == 0:
            return finished
        kth = ranked[min(self.k, ranked.len()) - 1]
        return finished.filter(pl.col(self.by) >= kth) if kth is not None else finished.clear()

    def rank(self, panes: pl.DataFrame, end_ms: int, ranked: pl.DataFrame | None = None) -> pl.DataFrame:
        """The window ending at `end_ms` from its panes' partial rows: fold, then keep the top k. With
        `ranked`, the candidates workers returned for parts of those panes, merged instead."""
        kept = self.candidates(panes) if ranked is None else self.top(ranked)
        start = pl.lit(end_ms - self.size_ms, pl.Int64)
        return kept.select(
            (start * _MS).cast(pl.Datetime("us", "UTC")).alias("window_start"),
            (pl.lit(end_ms, pl.Int64) * _MS).cast(pl.Datetime("us", "UTC")).alias("window_end"),
            *self.keys,
            *[a.out for a in self.aggs],
        )


def fold_to_panes(rows: pl.DataFrame, agg: WindowAggregate) -> pl.DataFrame:
    """Rows in partial form (the event-time column, the keys, the partial columns) folded into one
    row per (pane, key), the event-time column set to the pane's start: fold_per_task's work."""
    assert agg.window is not None
    on = agg.window.on
    pane = polars_fold.floor_to(pl.col(on).dt.epoch("us"), agg.window.slide_s * _MS * _MS)
    rows = rows.with_columns(pane.alias(on))
    folded = polars_fold.fold(rows, [on, *agg.keys], agg.aggs, from_records=False)
    return folded.with_columns(pl.col(on).cast(pl.Datetime("us", "UTC")))


def fusable(agg: WindowAggregate, top: TopK) -> bool:
    """Whether `agg -> key_by(top.partition_by) -> top` can run as one operator over panes."""
    return (
        agg.window is not None
        and not agg.window.tumbling
        and all(kind_of(a).pane_mergeable for a in agg.aggs)
        and top.with_ties
        and set(top.partition_by) <= set(agg.keys)
        and top.by in {a.out for a in agg.aggs}
    )


def fused_top_ks(plan: LogicalPlan) -> dict[str, tuple[str, WindowAggregate, TopK]]:
    """Top-k id -> (aggregate id, aggregate, top-k) of each sliding aggregate that alone feeds a
    top-k through one key_by by the top-k's partition: the pairs that run as one operator."""
    return {
        top_id: (agg_id, agg, top)
        for agg_id, agg, key, top_id, top in keyed_pairs(plan)
        if isinstance(agg, WindowAggregate)
        and isinstance(top, TopK)
        and key.keys == top.partition_by
        and fusable(agg, top)
    }

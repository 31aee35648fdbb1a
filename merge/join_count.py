"""A tumbling-window equi-join counted per group, in pieces that combine: each side's rows counted.

Why it merges (ADR 0022): the pairs of one window's join counted per group are, key by key, the
left side's rows times the right side's rows. A side's rows can therefore be counted anywhere (on a
worker over its chunk, on the VM over its share, across epochs) and the counts of the same (side,
window, key, group columns) added: the count aggregate's fold (merge/algebra.py). Only the product
at the window's close needs both sides; it runs in the VM's operator
(merge/spark/window_join_count.py). This module is the one definition both the workers and that
operator use, free of Spark so the worker imports it.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

import polars as pl

from core.plan import WINDOW, WindowAggregate, WindowJoin
from merge import polars_fold
from merge.algebra import kind
from merge.partials import WINDOW_START

# The operator's input columns (the pandas hand-off renames "_"-prefixed columns, hence the prefix):
SIDE = "sponge_side"  # 0 for the left input, 1 for the right
WINDOW_US = "sponge_window_us"  # the row's window start, microseconds since the epoch
N = "sponge_n"  # how many input rows the row stands for
_MS = 1000
_US = 1_000_000
(_COUNT,) = kind("count").columns


def counted(e: pl.Expr) -> pl.Expr:
    """Counts (of rows, of pairs) combined by the count aggregate's reduction."""
    return polars_fold.reduce(_COUNT.combine, e)


def _group(agg: WindowAggregate) -> tuple[str, ...]:
    return tuple(k for k in agg.keys if k != WINDOW)


@dataclass(frozen=True)
class JoinSide:
    """What one input of the join contributes: its rows per window, keyed by the join key under the
    left side's names, with the columns of its own that the count groups by."""

    side: int
    on: str  # the side's event-time column
    size_s: int
    keys: tuple[str, ...]  # the side's join keys
    names: tuple[str, ...]  # the same keys under the left side's names
    columns: tuple[str, ...]  # the side's columns the count groups by

    @classmethod
    def of(
        cls, join: WindowJoin, agg: WindowAggregate, side: int, input_columns: Collection[str]
    ) -> JoinSide:
        assert join.window is not None and side in (0, 1)
        keys = join.left_keys if side == 0 else join.right_keys
        on = join.window.on if side == 0 else join.right_window_on
        own = tuple(c for c in _group(agg) if c in input_columns and c not in keys)
        return cls(side, on, join.window.size_s, tuple(keys), tuple(join.left_keys), own)

    @property
    def reads(self) -> frozenset[str]:
        return frozenset((self.on, *self.keys, *self.columns))

    def counts(self, rows: pl.DataFrame) -> pl.DataFrame:
        """The side's rows counted per (window, key, columns): what a worker returns for its chunk.

        The window's start is the event time of the counted row, as a pane's start is for a partial
        aggregate, so the row lands in the window of the records it stands for.
        """
        start = polars_fold.floor_to(pl.col(self.on).dt.epoch("us"), self.size_s * _US)
        by = [
            start.cast(pl.Datetime("us", "UTC")).alias(WINDOW_START),
            *[pl.col(k).alias(n) for k, n in zip(self.keys, self.names, strict=True)],
            *[pl.col(c) for c in self.columns],
        ]
        out = rows.group_by(by).agg(pl.len().cast(pl.Int64).alias(N))
        return out.select(pl.lit(self.side, pl.Int32).alias(SIDE), pl.all())


@dataclass(frozen=True)
class JoinCount:
    """What the fused operator needs to know, kept free of Spark objects so it pickles small."""

    size_ms: int
    keys: tuple[str, ...]  # the join keys, under the left side's names
    left: tuple[str, ...]  # the left columns the count groups by
    right: tuple[str, ...]  # the right columns the count groups by
    group: tuple[str, ...]  # the aggregate's keys other than the window, in their order
    outs: tuple[str, ...]  # the aggregate's count columns

    @classmethod
    def of(cls, left: JoinSide, right: JoinSide, agg: WindowAggregate) -> JoinCount:
        right_cols = tuple(c for c in right.columns if c not in left.columns)
        outs = tuple(a.out for a in agg.aggs)
        return cls(left.size_s * _MS, left.names, left.columns, right_cols, _group(agg), outs)

    @property
    def columns(self) -> tuple[str, ...]:
        return (SIDE, WINDOW_US, *self.keys, *self.left, *self.right, N)

    def fold(self, rows: pl.DataFrame) -> pl.DataFrame:
        """One row per (side, key, side columns) of one window, counting the rows it stands for."""
        by = [c for c in self.columns if c not in (WINDOW_US, N)]
        return rows.group_by(by).agg(counted(pl.col(N)))

    def pairs(self, rows: pl.DataFrame, start_ms: int) -> pl.DataFrame:
        """The window starting at `start_ms`: its pairs counted per group (nulls never join, as in Spark)."""
        left = rows.filter(pl.col(SIDE) == 0).select(*self.keys, *self.left, pl.col(N).alias("_l"))
        right = rows.filter(pl.col(SIDE) == 1).select(*self.keys, *self.right, pl.col(N).alias("_r"))
        joined = left.join(right, on=list(self.keys), how="inner")
        counted_ = joined.group_by(list(self.group)).agg(counted(pl.col("_l") * pl.col("_r")).alias("_pairs"))
        start = pl.lit(start_ms, pl.Int64) * _MS
        return counted_.select(
            start.cast(pl.Datetime("us", "UTC")).alias("window_start"),
            (start + self.size_ms * _MS).cast(pl.Datetime("us", "UTC")).alias("window_end"),
            *self.group,
            *[pl.col("_pairs").alias(out) for out in self.outs],
        )

"""A window aggregate's open panes per key, as a keyed step: the count whose state moves with its keys.

Why a step of its own: Sponge's merge operators let workers return partial panes that the VM folds
into its own, so a mergeable aggregate's state never leaves the VM. The paper's baselines without
merge operators (SFBase, SpongeRO, SpongeTO) cannot do that: the aggregate's state moves to the
workers with the keys they take, and comes back when the keys do. This step is that aggregate as the
keyed handoff runs it (merge/keyed_step.py): per key, the partial of every pane the watermark has not
passed; a pane is emitted once, folded, when the watermark reaches its end, and leaves the state.
What it emits is the partial form the fused sliding top-k reads (merge/spark/sliding_top_k.py), so
the window assembly and the rank after it are the VM's as in every other lowering.

An emitted pane's event time is its end less one microsecond, not its start: the downstream operator
drops rows behind the previous epoch's watermark, and a pane falls due in the first epoch whose
watermark reaches its end, so only an instant inside the pane after that watermark is never late.
The downstream operator assigns the row to its pane by flooring, which that instant survives.
"""

from __future__ import annotations

from dataclasses import dataclass

import polars as pl

from core.ablations import moves_by_key
from core.errors import PlanError
from core.plan import WindowAggregate
from merge import polars_fold
from merge.algebra import kind_of
from merge.keyed_groups import Frames
from merge.keyed_step import SIDE, Stepped, key_column, next_due, stacked

PANES = "panes"
NAMES = (PANES,)
_US_PER_S = 1_000_000
_PANE = "sponge_pane"  # a pane's start, microseconds


@dataclass(frozen=True)
class PaneStep:
    """What the step needs to know, free of Spark objects so it pickles small: the aggregate and its
    partial columns, in the order the partial form lays them out."""

    agg: WindowAggregate
    values: tuple[str, ...]

    @classmethod
    def of(cls, agg: WindowAggregate) -> PaneStep:
        """The step of `agg`, whose window must be its own and whose partials combine across panes."""
        if not moves_by_key(agg):
            hint = "it needs a window of its own and partials that combine across panes"
            raise PlanError(f"{agg.kind} has no pane step", hint=hint)
        return cls(agg, tuple(c.name(a.out) for a in agg.aggs for c in kind_of(a).columns))

    @property
    def on(self) -> str:
        assert self.agg.window is not None
        return self.agg.window.on

    @property
    def slide_us(self) -> int:
        assert self.agg.window is not None
        return self.agg.window.slide_s * _US_PER_S

    @property
    def read(self) -> list[str]:
        """The partial form's columns: the event time, the keys, the partial columns."""
        return [self.on, *self.agg.keys, *self.values]

    @property
    def keys(self) -> list[str]:
        return list(self.agg.keys)

    @property
    def columns(self) -> list[str]:
        return [SIDE, *[key_column(i) for i in range(len(self.agg.keys))], *self.read]

    @property
    def names(self) -> tuple[str, ...]:
        return NAMES

    def _end_ms(self) -> pl.Expr:
        return polars_fold.ceil_ms(pl.col(_PANE) + self.slide_us)

    def _panes(self, rows: pl.DataFrame) -> pl.DataFrame:
        """Partial rows folded into one row per (pane, key)."""
        pane = polars_fold.floor_to(pl.col(self.on).dt.epoch("us"), self.slide_us)
        rows = rows.select(pane.alias(_PANE), *self.agg.keys, *self.values)
        return polars_fold.fold(rows, [_PANE, *self.agg.keys], self.agg.aggs, from_records=False)

    def lifted(self, records: pl.DataFrame) -> pl.DataFrame:
        """The aggregate's records (a worker's, run through the stage's prefix) in the partial form the
        step reads, folded per pane and key as the VM folds its own per task."""
        pane = polars_fold.floor_to(pl.col(self.on).dt.epoch("us"), self.slide_us)
        folded = polars_fold.fold(
            records.with_columns(pane.alias(_PANE)), [_PANE, *self.agg.keys], self.agg.aggs, from_records=True
        )
        return folded.select(
            pl.col(_PANE).cast(pl.Datetime("us", "UTC")).alias(self.on), *self.agg.keys, *self.values
        )

    def step(self, state: Frames, new: pl.DataFrame, watermark_ms: int) -> Stepped:
        panes = self._panes(new.select(self.read))
        held = state.get(PANES)
        if held is not None and held.height:
            both = pl.concat([held, panes.select(held.columns)], how="vertical_relaxed")
            panes = polars_fold.fold(both, [_PANE, *self.agg.keys], self.agg.aggs, from_records=False)
        return self._emitted(panes, watermark_ms)

    def expire(self, state: Frames, watermark_ms: int) -> Stepped:
        return self._emitted(state.get(PANES), watermark_ms)

    def _emitted(self, panes: pl.DataFrame | None, watermark_ms: int) -> Stepped:
        out = None
        if panes is not None and panes.height:
            due = panes.filter(self._end_ms() <= watermark_ms)
            panes = panes.filter(self._end_ms() > watermark_ms)
            if due.height:
                at = (pl.col(_PANE) + self.slide_us - 1).cast(pl.Datetime("us", "UTC"))
                out = due.select(at.alias(self.on), *self.agg.keys, *self.values)
        state = {PANES: panes}
        return Stepped(state, out, next_due(self, state), out.height if out is not None else 0)

    def due_keys(self, state: Frames, watermark_ms: int) -> pl.DataFrame | None:
        """The keys of the panes the watermark closes."""
        panes = state.get(PANES)
        if panes is None or panes.height == 0:
            return None
        return panes.filter(self._end_ms() <= watermark_ms).select(self.keys)

    def joined(self, *states: Frames) -> Frames:
        return {PANES: stacked([s.get(PANES) for s in states])}

    def due_at(self) -> dict[str, pl.Expr]:
        return {PANES: self._end_ms().min()}

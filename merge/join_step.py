"""An unwindowed inner equi-join's step, free of Spark: Q3's persons joined with their auctions.

Why a step of its own: the join's state does not merge (a pair needs both of its rows in one place),
so during a burst a worker can take key groups of it over only by running the same step over the
same state as the VM (ADR 0024). The state is every row seen of each side, as in Spark's
stream-stream join without a watermark condition (nothing of it ever becomes unneeded: a person may
open another auction at any time). A step emits each pair once, in the batch where its second row
arrives: the new left rows against every right row, and the old left rows against the new right rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import polars as pl

from core.errors import PlanError
from core.expr import Expr
from core.expr_polars import to_polars
from core.plan import WindowJoin
from merge.keyed_groups import Frames
from merge.keyed_step import SIDE, Stepped, TwoSided, stacked

LEFTS, RIGHTS = "lefts", "rights"
NAMES = (LEFTS, RIGHTS)


@dataclass(frozen=True)
class JoinStep(TwoSided):
    """What the step needs to know, free of Spark objects so it pickles small."""

    condition: Expr | None

    @classmethod
    def of(cls, op: WindowJoin, left: Sequence[str], right: Sequence[str]) -> JoinStep:
        if op.window is not None:
            raise PlanError("a windowed join has no keyed step", hint="its workers count sides (join_count)")
        return cls(len(op.left_keys), tuple(left), tuple(right), op.condition)

    def step(self, state: Frames, new: pl.DataFrame, watermark_ms: int) -> Stepped:
        """Add a batch's rows (`self.columns`) and emit the pairs each new row completes. Rows with a
        null key match nothing (SQL's inner join) and are not kept."""
        keys = self.keys
        lefts = new.filter(pl.col(SIDE) == 0).select(*keys, *self.left).drop_nulls(keys)
        rights = new.filter(pl.col(SIDE) == 1).select(*keys, *self.right).drop_nulls(keys)
        old_lefts, old_rights = state.get(LEFTS), state.get(RIGHTS)
        all_rights = stacked([old_rights, rights])
        pairs = []
        if lefts.height and all_rights is not None:
            pairs.append(lefts.join(all_rights, on=keys, how="inner"))
        if rights.height and old_lefts is not None and old_lefts.height:
            pairs.append(old_lefts.join(rights, on=keys, how="inner"))
        out = None
        if pairs:
            out = pl.concat(pairs, how="vertical_relaxed").select(*self.left, *self.right)
            if self.condition is not None:
                out = out.filter(to_polars(self.condition))
        kept = {LEFTS: stacked([old_lefts, lefts]), RIGHTS: all_rights}
        return Stepped(kept, out, None, out.height if out is not None else 0)

    def expire(self, state: Frames, watermark_ms: int) -> Stepped:
        """Nothing of an unwindowed join falls due: the state stays whole."""
        return Stepped(state, None, None)

    def due_keys(self, state: Frames, watermark_ms: int) -> pl.DataFrame | None:
        return None

    @property
    def names(self) -> tuple[str, ...]:
        return NAMES

    def joined(self, *states: Frames) -> Frames:
        return {name: stacked([s.get(name) for s in states]) for name in NAMES}

    def due_at(self) -> dict[str, pl.Expr]:
        return {}

"""The best right row of each left entity, decided at its close: the operator's step, free of Spark.

Why a step of its own: the VM's transformWithState processor (merge/spark/winner_at_close.py, ADR
0020) only reads the state, calls `step` or `expire`, writes the state back and sets the timer. Any
other place that must decide a key group's winners the same way (a worker holding the group during a
burst) runs this same function over the same state: one definition, as merge/algebra.py is for folds.

The state is two frames: the open entities (each with its best right row so far) and the right rows a
later entity could still take (those not yet behind the watermark). A step adds the batch's rows,
offers every candidate to every open entity of its key, then closes: entities whose close the
watermark has passed leave with their winner, pending rows behind the watermark are dropped.
Offering a row twice changes nothing (the best of the best and a candidate is idempotent), so a
replayed batch yields the same state.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import polars as pl

from core.expr import Expr
from core.expr_polars import to_polars
from core.plan import WindowAggregate, WinnerAtClose
from merge.keyed_step import SIDE, Frames, Stepped, TwoSided, next_due
from merge.partials import latest_partials
from merge.polars_fold import US_PER_MS, ceil_ms

LID = "sponge_lid"  # an open entity's number within its state
HAS_BEST = "sponge_has_best"


@dataclass(frozen=True)
class WinnerSpec(TwoSided):
    """What the step needs to know, free of Spark objects so it pickles small."""

    timestamps: tuple[str, ...]
    opens: str
    closes: str
    at: str
    by: str
    condition: Expr | None
    then: WindowAggregate | None = None  # the aggregate over close times the winners feed (`emitted`)

    @classmethod
    def of(
        cls,
        op: WinnerAtClose,
        left: Sequence[str],
        right: Sequence[str],
        timestamps: Collection[str],
        then: WindowAggregate | None = None,
    ) -> WinnerSpec:
        """The spec of `op` over inputs with columns `left` and `right`, `timestamps` among them; with
        `then`, the fused aggregate (core/fusions.py `closed_aggregates`)."""
        stamped = tuple(c for c in (*left, *right) if c in timestamps)
        return cls(
            len(op.left_keys),
            tuple(left),
            tuple(right),
            stamped,
            op.opens,
            op.closes,
            op.at,
            op.by,
            op.condition,
            then,
        )

    # ---- the keyed step (merge/keyed_step.py) over the state as named frames ----

    @property
    def names(self) -> tuple[str, ...]:
        return (OPEN, PENDING)

    def step(self, state: Frames, new: pl.DataFrame, watermark_ms: int) -> Stepped:
        return _stepped(step(self, state_of(state), new, watermark_ms))

    def expire(self, state: Frames, watermark_ms: int) -> Stepped:
        return _stepped(expire(self, state_of(state), watermark_ms))

    def due_keys(self, state: Frames, watermark_ms: int) -> pl.DataFrame | None:
        """The keys of the entities the watermark closes."""
        open_ = state.get(OPEN)
        if open_ is None or open_.height == 0:
            return None
        return open_.filter(_closes_ms(self) <= watermark_ms).select(self.keys)

    def joined(self, *states: Frames) -> Frames:
        return state_frames(joined(*(state_of(s) for s in states)))

    def due_at(self) -> dict[str, pl.Expr]:
        """An entity's close; the instant after the last pending row, when the pending rows can go."""
        return {OPEN: _first_close_ms(self), PENDING: pl.col(self.at).dt.epoch("us").max() // US_PER_MS + 1}

    def offer(self, open_: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
        """Each open entity's best right row after seeing `candidates` (right rows of its keys)."""
        if open_.height == 0 or candidates.height == 0:
            return open_
        pairs = open_.select(LID, *self.keys, *self.left).join(candidates, on=self.keys, how="inner")
        inside = (pl.col(self.opens) <= pl.col(self.at)) & (pl.col(self.at) < pl.col(self.closes))
        if self.condition is not None:
            inside = inside & to_polars(self.condition)
        pairs = pairs.filter(inside)
        if pairs.height == 0:
            return open_
        held = open_.filter(pl.col(HAS_BEST)).select(LID, *self.right)
        rest = [c for c in self.right if c not in (self.by, self.at)]
        best = (
            pl.concat([held, pairs.select(LID, *self.right)], how="vertical_relaxed")
            .sort([self.by, self.at, *rest], descending=[True, False] + [False] * len(rest), nulls_last=True)
            .unique(LID, keep="first", maintain_order=True)
            .with_columns(pl.lit(True).alias(HAS_BEST))
        )
        return (
            open_.drop(*self.right, HAS_BEST)
            .join(best, on=LID, how="left")
            .with_columns(pl.col(HAS_BEST).fill_null(False))
        )


@dataclass(frozen=True)
class WinnerState:
    """The open entities and the pending right rows (None: none kept)."""

    open: pl.DataFrame | None = None
    pending: pl.DataFrame | None = None


@dataclass(frozen=True)
class Decided:
    """What a step leaves: the new state, what it emits for the winners decided (`emitted`: left then
    right columns, or the fused aggregate's partials) and the earliest watermark (ms) at which
    something more is due, if anything is."""

    state: WinnerState
    won: pl.DataFrame | None
    next_due_ms: int | None
    winners: int = 0  # the entities decided (`won` may hold fewer rows: partials)


def _empty_open(spec: WinnerSpec, like: pl.DataFrame) -> pl.DataFrame:
    columns = {c: like.schema[c] for c in (*spec.keys, *spec.left, *spec.right)}
    return pl.DataFrame(schema={LID: pl.Int64, **columns, HAS_BEST: pl.Boolean})


def step(spec: WinnerSpec, state: WinnerState, new: pl.DataFrame, watermark_ms: int) -> Decided:
    """Add a batch's rows (`spec.columns`) to `state` and decide what the watermark closes.

    Late rows are dropped as Spark's stateful operators drop them: an entity whose close is already
    behind the watermark, and a right row with a null key, time or rank.
    """
    s = spec
    lefts = new.filter(pl.col(SIDE) == 0).select(*s.keys, *s.left)
    lefts = lefts.drop_nulls([*s.keys, s.opens, s.closes]).filter(
        ceil_ms(pl.col(s.closes).dt.epoch("us")) > watermark_ms
    )
    rights = new.filter(pl.col(SIDE) == 1).select(*s.keys, *s.right).drop_nulls([*s.keys, s.at, s.by])
    open_ = state.open if state.open is not None else _empty_open(s, new)
    if lefts.height:
        first = (open_[LID].max() + 1) if open_.height else 0  # type: ignore[operator]
        added = lefts.with_row_index(LID, offset=first).with_columns(
            pl.col(LID).cast(pl.Int64),
            *[pl.lit(None, dtype=new.schema[c]).alias(c) for c in s.right],
            pl.lit(False).alias(HAS_BEST),
        )
        open_ = pl.concat([open_, added.select(open_.columns)], how="vertical_relaxed")
    held = state.pending
    candidates = rights if held is None else pl.concat([held, rights], how="vertical_relaxed")
    return expire(s, WinnerState(s.offer(open_, candidates), candidates), watermark_ms)


def expire(spec: WinnerSpec, state: WinnerState, watermark_ms: int) -> Decided:
    """Emit the entities whose close the watermark has passed, keep the rest and the right rows a
    later entity could still take, and say when the next one is due."""
    s = spec
    due_at = _closes_ms(s)
    won, decided = None, 0
    open_, pending = state.open, state.pending
    first_close = open_.select(_first_close_ms(s)).item() if open_ is not None and open_.height else None
    if open_ is not None and first_close is not None and first_close <= watermark_ms:  # else none closes
        winners = open_.filter((due_at <= watermark_ms) & pl.col(HAS_BEST)).select(*s.left, *s.right)
        won, decided = emitted(s, winners), winners.height
        open_ = open_.filter(due_at > watermark_ms)
    if pending is not None:
        pending = pending.filter(pl.col(s.at).dt.epoch("us") >= watermark_ms * US_PER_MS)
    kept = WinnerState(open_, pending)
    return Decided(kept, won, next_due(s, state_frames(kept)), decided)


def emitted(spec: WinnerSpec, won: pl.DataFrame) -> pl.DataFrame:
    """What the operator emits for the winners `won`: their rows, or with `spec.then` the fused
    aggregate's partial state of them (merge/partials.py `latest_partials`), which the aggregate
    folds as it folds workers' partials. A worker holding key groups emits the same, so the
    aggregate's work on its winners is done where they were decided."""
    return won if spec.then is None else latest_partials(spec.then, won)


def _closes_ms(spec: WinnerSpec) -> pl.Expr:
    """The watermark (ms) at which an open entity closes."""
    return ceil_ms(pl.col(spec.closes).dt.epoch("us"))


def _first_close_ms(spec: WinnerSpec) -> pl.Expr:
    """The first of the entities' closes (ms): the earliest close taken once, not each entity's."""
    return ceil_ms(pl.col(spec.closes).min().dt.epoch("us"))


def joined(*states: WinnerState) -> WinnerState:
    """States of disjoint keys as one, in one concatenation; the entities are renumbered 0, 1, ... (an
    entity's number only names it within a state)."""
    opens, pendings, first = [], [], 0
    for st in states:
        if st.open is not None and st.open.height:
            number = pl.int_range(first, first + st.open.height, dtype=pl.Int64)
            opens.append(st.open.with_columns(number.alias(LID)))  # dense: numbers never outgrow the rows
            first += st.open.height
        if st.pending is not None and st.pending.height:
            pendings.append(st.pending)
    return WinnerState(_stacked(opens, states, "open"), _stacked(pendings, states, "pending"))


def _stacked(frames: list[pl.DataFrame], states: Sequence[WinnerState], name: str) -> pl.DataFrame | None:
    """The frames as one (columns in the first's order); with none, the first state's own (kept empty
    or None as it was)."""
    if not frames:
        return next((getattr(st, name) for st in states if getattr(st, name) is not None), None)
    if len(frames) == 1:
        return frames[0]
    return pl.concat([frames[0], *(f.select(frames[0].columns) for f in frames[1:])], how="vertical_relaxed")


# ---- the state as named frames (merge/keyed_groups.py carries them in seals) --------------------

OPEN, PENDING = "open", "pending"


def state_frames(state: WinnerState) -> dict[str, pl.DataFrame | None]:
    return {OPEN: state.open, PENDING: state.pending}


def state_of(frames: Frames) -> WinnerState:
    return WinnerState(frames.get(OPEN), frames.get(PENDING))


def _stepped(decided: Decided) -> Stepped:
    return Stepped(state_frames(decided.state), decided.won, decided.next_due_ms, decided.winners)

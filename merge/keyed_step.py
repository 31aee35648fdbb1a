"""A keyed operator's step as the handoff sees it: state as named frames, every row of them keyed.

Why an interface: the batch of a bucket of key groups (merge/keyed_batch.py), the worker's program
(lambda_worker/keyed.py) and the agent's cut of a group's state by key run the same way for every
operator whose state does not merge (ADR 0024): they need to step a state, expire it at a watermark,
take the keys a batch reads out of it and join disjoint parts back. Only the step and what falls due
at a watermark belong to the operator (merge/winner.py, merge/join_step.py); taking keys is
generic, because every frame of a keyed state carries the key columns.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import polars as pl

from merge.keyed_groups import Frames, groups_of

SIDE = "sponge_side"  # an input row's port: 0 the left input, 1 the right (2: a receipt, keyed_batch)


def key_column(i: int) -> str:
    """The i-th key column of a keyed step's input and state: each input's key, renamed alike."""
    return f"sponge_k{i}"


@dataclass(frozen=True)
class Stepped:
    """What a step leaves: the new state, what the operator emits, the earliest watermark (ms) at
    which something more is due (None: nothing), and how many decisions the output holds (a fused
    aggregate's partials may hold fewer rows)."""

    state: Frames
    out: pl.DataFrame | None
    next_due_ms: int | None
    decided: int = 0


@dataclass(frozen=True)
class TwoSided:
    """The input layout of a step over two inputs: the side, the join key (each input's renamed
    alike), then the left's and the right's columns (merge/spark/keyed_processor.py lays rows out so)."""

    n_keys: int
    left: tuple[str, ...]
    right: tuple[str, ...]

    @property
    def keys(self) -> list[str]:
        return [key_column(i) for i in range(self.n_keys)]

    @property
    def columns(self) -> list[str]:
        return [SIDE, *self.keys, *self.left, *self.right]


class KeyedStep(Protocol):
    """One keyed operator's step, free of Spark so it pickles small and runs on a worker."""

    @property
    def keys(self) -> list[str]:
        """The key columns of the step's input and of every state frame."""
        ...

    @property
    def columns(self) -> list[str]:
        """The step's input columns, in order."""
        ...

    @property
    def names(self) -> tuple[str, ...]:
        """The names of the state's frames."""
        ...

    def step(self, state: Frames, new: pl.DataFrame, watermark_ms: int) -> Stepped: ...

    def expire(self, state: Frames, watermark_ms: int) -> Stepped:
        """A step with no new rows: emit what the watermark makes due."""
        ...

    def due_keys(self, state: Frames, watermark_ms: int) -> pl.DataFrame | None:
        """The keys whose state a step at `watermark_ms` changes even without a row of theirs."""
        ...

    def joined(self, *states: Frames) -> Frames:
        """States of disjoint keys as one."""
        ...

    def due_at(self) -> Mapping[str, pl.Expr]:
        """Per state frame, the aggregation of its rows that gives the earliest watermark (ms) at
        which they have something due (a frame not named has nothing due)."""
        ...


def stacked(frames: Sequence[pl.DataFrame | None]) -> pl.DataFrame | None:
    """Frames of one state's name as one, columns in the first's order; None when there are none."""
    present = [f for f in frames if f is not None]
    if not present:
        return None
    if len(present) == 1:
        return present[0]
    first = present[0]
    return pl.concat([first, *(f.select(first.columns) for f in present[1:])], how="vertical_relaxed")


def keys_of(step: KeyedStep, state: Frames) -> pl.DataFrame | None:
    """The distinct keys `state` holds anything of (None when it holds nothing)."""
    frames = [f.select(step.keys) for f in state.values() if f is not None and f.height]
    return pl.concat(frames, how="vertical_relaxed").unique() if frames else None


def take(step: KeyedStep, state: Frames, keys: pl.DataFrame | None) -> tuple[Frames, Frames]:
    """(the rows of `keys`, the rest): a key-local step may run on the two apart."""
    taken, rest = split(step, state, keys)
    return taken, rest()


def split(step: KeyedStep, state: Frames, keys: pl.DataFrame | None) -> tuple[Frames, Callable[[], Frames]]:
    """`take`, its rest left to compute when called: the rows of a few keys are cheap to cut out of a
    large state, the rest is a copy of nearly all of it, which a caller can make while it waits."""
    if keys is None or keys.height == 0:
        return {name: None for name in state}, lambda: state
    taken: dict[str, pl.DataFrame | None] = {}
    cuts: dict[str, Callable[[], pl.DataFrame | None]] = {}
    for name, frame in state.items():
        if frame is None:
            taken[name] = None
            cuts[name] = lambda: None
            continue
        wanted = keys.select([pl.col(k).cast(frame.schema[k]) for k in step.keys]).unique()
        if len(step.keys) == 1:  # one key column: a membership mask, one pass for both halves
            mask = frame[step.keys[0]].is_in(wanted[step.keys[0]].implode())
            taken[name] = frame.filter(mask)
            cuts[name] = lambda frame=frame, mask=mask: frame.filter(~mask)
        else:
            taken[name] = frame.join(wanted, on=step.keys, how="semi")
            cuts[name] = lambda frame=frame, wanted=wanted: frame.join(wanted, on=step.keys, how="anti")
    return taken, lambda: {name: cut() for name, cut in cuts.items()}


def select(
    step: KeyedStep, state: Frames, touched: pl.DataFrame | None, watermark_ms: int
) -> tuple[Frames, Frames]:
    """(what a step at `watermark_ms` over rows of the `touched` keys reads, the rest after the same
    watermark): the keys falling due go with the first. So a step over the first, joined with the
    second, is the step over the whole (tests/merge/test_winner.py, tests/merge/test_join_step.py)."""
    wanted = [k.select(step.keys) for k in (touched, step.due_keys(state, watermark_ms)) if k is not None]
    keys = pl.concat(wanted, how="vertical_relaxed") if wanted else None
    needed, rest = take(step, state, keys)
    return needed, step.expire(rest, watermark_ms).state


def next_due(step: KeyedStep, state: Frames) -> int | None:
    """The earliest watermark (ms) at which `state` has something due (None: nothing)."""
    dues = [
        frame.select(agg).item()
        for name, agg in step.due_at().items()
        if (frame := state.get(name)) is not None and frame.height
    ]
    present = [int(d) for d in dues if d is not None]
    return min(present) if present else None


def next_due_by_group(step: KeyedStep, state: Frames, groups: Collection[int]) -> dict[int, int | None]:
    """`next_due` of each key group's part of `state`, in one pass per frame (ADR 0023's groups)."""
    dues: dict[int, int | None] = dict.fromkeys(groups)
    for name, agg in step.due_at().items():
        frame = state.get(name)
        if frame is None or frame.height == 0:
            continue
        per = frame.group_by(groups_of(frame, step.keys)).agg(agg)
        for g, due in per.iter_rows():
            if due is not None and g in dues:
                known = dues[g]
                dues[g] = int(due) if known is None else min(known, int(due))
    return dues

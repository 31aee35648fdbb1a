"""Where a keyed stage's key group runs in a batch, what moves, and how a seal crosses the wire (ADR 0024).

Why a rule of its own, free of Spark and of the network: it is the whole of what makes offloading
non-mergeable state exact, so it is decided in one place and tested against a brute force under any
schedule of switches (tests/merge/test_keyed_groups.py). The VM's transformWithState processor calls
`decide` for each group of each batch and carries out the decision; the group's bookkeeping
(`GroupState`) lives in the processor's checkpointed state, so a replayed batch decides the same.

The rule: a group's batch runs in one place. With records stashed for workers it runs on a worker,
the VM's own rows of the group sent along (and, the first time, the VM's state of the group: it moves
in); with only the VM's rows, it runs on the VM, the workers' state taken back first if they held it;
held by workers with nothing new but a close due, it runs on a worker to emit it.

A seal is one Arrow table (merge/frames.py): the group's state frames (opaque to the agent, which only
stores them), the stashed records by entity (`part:<entity>`), the VM's rows sent along (`forwarded`)
and the watermark; the answer is the new state frames, the outputs (`out`) and when it is next due.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from enum import StrEnum

import polars as pl
import pyarrow as pa

from core.offload_plan import key_groups_of
from merge.frames import pack, unpack

GROUP = "sponge_group"  # a record's key group: Spark's pmod(xxhash64(key), 128) (ADR 0023)
RECEIPT = ("sponge_entity", "sponge_start", "sponge_end", "sponge_seq")  # names a stashed chunk
RECEIPT_TIME = "sponge_time"  # a receipt's event time: its chunk's last

OUT = "out"
FORWARDED = "forwarded"
PART = "part:"
WATERMARK = "watermark_ms"
NEXT_DUE = "next_due_ms"

Frames = Mapping[str, pl.DataFrame | None]


def groups_of(frame: pl.DataFrame, keys: list[str]) -> pl.Series:
    """The key group of each row of `frame` whose key is in columns `keys` (ADR 0023)."""
    return pl.Series(GROUP, key_groups_of(pa.table({k: frame[k].to_arrow() for k in keys})).astype("int64"))


class Where(StrEnum):
    VM = "vm"
    WORKERS = "workers"
    IDLE = "idle"  # nothing to do this batch (held by workers, nothing new, nothing due)


@dataclass(frozen=True)
class GroupState:
    """What the VM's processor keeps per key group: who holds its state, the version the workers'
    copy is at (never reused: a seal makes the next, a hand-back retires one) and when the workers'
    copy next has something due."""

    on_workers: bool = False
    version: int = 0
    next_due_ms: int | None = None


@dataclass(frozen=True)
class Decision:
    where: Where
    hand_back: bool = False  # take the workers' state (at `version`) back before stepping on the VM
    move_in: bool = False  # send the VM's state of the group with the seal: the workers' copy starts
    forward: bool = False  # send the VM's rows of the batch with the seal


def decide(
    group: GroupState, local_rows: bool, stashed: bool, watermark_ms: int, owned: bool = False
) -> Decision:
    """Where the group runs in a batch that brought `local_rows` to the VM and `stashed` to the agent.
    `owned`: the plan gives the group to the workers, for a stage whose rows all reach the VM (its
    input is another operator's output, not a source's: ADR 0028); the VM forwards them."""
    if stashed or (owned and local_rows):
        return Decision(Where.WORKERS, move_in=not group.on_workers, forward=local_rows)
    if local_rows:
        return Decision(Where.VM, hand_back=group.on_workers)
    due = group.next_due_ms is not None and group.next_due_ms <= watermark_ms
    if group.on_workers and due:
        return Decision(Where.WORKERS)
    return Decision(Where.IDLE if group.on_workers else Where.VM)


def after(group: GroupState, decision: Decision, next_due_ms: int | None) -> GroupState:
    """The group's bookkeeping once the decision was carried out (`next_due_ms`: the seal's answer)."""
    if decision.where is Where.WORKERS:
        return GroupState(True, group.version + 1, next_due_ms)
    if decision.hand_back:
        return GroupState(False, group.version + 1, None)
    return replace(group, next_due_ms=None) if decision.where is Where.VM else group


# ---- a seal on the wire ---------------------------------------------------------------------------


def seal_request(
    state: Frames, parts: Mapping[str, pl.DataFrame], forwarded: pl.DataFrame | None, watermark_ms: int
) -> pa.Table:
    frames = {**state, **{PART + e: f for e, f in parts.items()}, FORWARDED: forwarded}
    return pack(frames, {WATERMARK: watermark_ms})


def read_request(
    table: pa.Table,
) -> tuple[dict[str, pl.DataFrame | None], dict[str, pl.DataFrame], pl.DataFrame | None, int]:
    """(state frames, stashed records by entity, forwarded rows, watermark) of a seal request."""
    frames, numbers = unpack(table)
    parts = {k[len(PART) :]: f for k, f in frames.items() if k.startswith(PART) and f is not None}
    state = {k: f for k, f in frames.items() if not k.startswith(PART) and k != FORWARDED}
    watermark = numbers[WATERMARK]
    assert watermark is not None
    return state, parts, frames.get(FORWARDED), watermark


def seal_answer(state: Frames, out: pl.DataFrame | None, next_due_ms: int | None) -> pa.Table:
    return pack({**state, OUT: out}, {NEXT_DUE: next_due_ms})


def read_answer(table: pa.Table) -> tuple[dict[str, pl.DataFrame | None], pl.DataFrame | None, int | None]:
    """(state frames, outputs, next due) of a worker's answer to a seal."""
    frames, numbers = unpack(table)
    out = frames.pop(OUT, None)
    return frames, out, numbers[NEXT_DUE]


def groups_answer(out: pl.DataFrame | None, dues: Mapping[int, int | None]) -> pa.Table:
    """The agent's answer to the VM: the outputs, and when each sealed group is next due."""
    return pack({OUT: out}, {f"{NEXT_DUE}:{g}": due for g, due in dues.items()})


def read_groups_answer(table: pa.Table) -> tuple[pl.DataFrame | None, dict[int, int | None]]:
    frames, numbers = unpack(table)
    prefix = NEXT_DUE + ":"
    return frames.get(OUT), {int(k[len(prefix) :]): v for k, v in numbers.items() if k.startswith(prefix)}

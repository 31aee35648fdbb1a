"""Where a keyed stage's key group runs in a batch, and what moves: the coordinator's rule (ADR 0024).

Why a rule of its own, free of Spark and of the network: it is the whole of what makes offloading
non-mergeable state exact, so it is decided in one place and tested against a brute force under any
schedule of switches (tests/merge/test_keyed_groups.py). The VM's transformWithState processor calls
`decide` for each group of each batch and carries out the decision; the group's bookkeeping
(`GroupState`) lives in the processor's checkpointed state, so a replayed batch decides the same.

The rule: a group runs, each batch, where all its rows can be. With rows of its own on the VM it runs
on the VM (taking the workers' state and this batch's stashed parts back first if they held it);
with stashed rows only, it runs on a worker (sending the VM's rows of the group along the first time);
held by workers with nothing new but a close due, it runs on a worker to emit it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from enum import StrEnum


class Where(StrEnum):
    VM = "vm"
    WORKERS = "workers"
    IDLE = "idle"  # nothing to do this batch (held by workers, nothing new, nothing due)


@dataclass(frozen=True)
class GroupState:
    """What the VM's processor keeps per key group: who holds its state, the version of the workers'
    copy (seals applied so far) and when the workers' copy next has something due."""

    on_workers: bool = False
    version: int = 0
    next_due_ms: int | None = None


@dataclass(frozen=True)
class Decision:
    where: Where
    hand_back: bool = False  # take the workers' state (at `version`) back before stepping on the VM
    move_in: bool = False  # send the VM's rows of the group with the seal: the workers' copy starts
    pull_parts: bool = False  # the batch's stashed parts of the group run on the VM


def decide(group: GroupState, local_rows: bool, stashed: bool, watermark_ms: int) -> Decision:
    """Where the group runs in a batch that brought `local_rows` to the VM and `stashed` to the agent."""
    if local_rows:
        return Decision(Where.VM, hand_back=group.on_workers, pull_parts=stashed)
    if stashed:
        return Decision(Where.WORKERS, move_in=not group.on_workers)
    due = group.next_due_ms is not None and group.next_due_ms <= watermark_ms
    if group.on_workers and due:
        return Decision(Where.WORKERS)
    return Decision(Where.IDLE if group.on_workers else Where.VM)


def after(group: GroupState, decision: Decision, next_due_ms: int | None) -> GroupState:
    """The group's bookkeeping once the decision was carried out (`next_due_ms`: the step's answer)."""
    if decision.where is Where.WORKERS:
        return GroupState(True, group.version + 1, next_due_ms)
    if decision.where is Where.VM:
        return replace(group, on_workers=False, next_due_ms=None)
    return group

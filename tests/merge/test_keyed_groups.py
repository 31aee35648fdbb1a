"""The coordinator's rule against a brute force: groups switched between the VM and the workers at
random points (mid-batch too), moved back and forth, workers dying mid-seal, decide the same winners."""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from merge.keyed_groups import (
    Decision,
    GroupState,
    Where,
    after,
    decide,
    read_answer,
    read_request,
    seal_answer,
    seal_request,
)
from merge.winner import Decided, WinnerState, step
from tests.merge.test_winner import END_MS, SPEC, _brute_force, _cut, _frame, _rows, auctions, bids

pytestmark = pytest.mark.timeout(120)

GROUPS = 3


def _group(row: dict) -> int:
    return int(row.get("a_id", row.get("b_auction"))) % GROUPS


@dataclass
class Agent:
    """The workers' side: every version of every group's state it was given or made, and seals as a
    pure function of (version or moved state, records, watermark)."""

    versions: dict[tuple[int, int], WinnerState] = field(default_factory=dict)

    def seal(self, g: int, version: int, rows: list[dict], moved: WinnerState | None, wm: int) -> Decided:
        base = moved if moved is not None else self.versions.get((g, version), WinnerState())
        decided = step(SPEC, base, _frame(rows), wm)
        self.versions[(g, version + 1)] = decided.state
        return decided


def _won(decided: Decided) -> set[tuple]:
    return {tuple(r) for r in decided.won.iter_rows()} if decided.won is not None else set()


def _run(
    batches: list[list[tuple[int, dict]]], owners: list[list[tuple[bool, bool]]], kills: list[bool]
) -> set:
    """Each batch, each group's rows go to the VM or are stashed for workers: `owners[b][g]` is (owner at
    the batch's start, whether it switches mid-batch). A killed seal's answer is lost and asked again."""
    agent, vm = Agent(), {g: WinnerState() for g in range(GROUPS)}
    status = {g: GroupState() for g in range(GROUPS)}
    won: set[tuple] = set()
    watermark = 0
    seal_no = 0

    def run_group(g: int, local: list[dict], stashed: list[dict], wm: int) -> None:
        nonlocal seal_no, won
        d: Decision = decide(status[g], bool(local), bool(stashed), wm)
        if d.where is Where.VM:
            state = agent.versions.get((g, status[g].version), WinnerState()) if d.hand_back else vm[g]
            decided = step(SPEC, state, _frame(local), wm)
            vm[g] = decided.state
        elif d.where is Where.WORKERS:
            moved = vm[g] if d.move_in else None
            rows = stashed + (local if d.forward else [])
            if kills[seal_no % len(kills)]:  # the worker dies holding the state: its answer never comes
                agent.seal(g, status[g].version, rows, moved, wm)
            seal_no += 1
            decided = agent.seal(g, status[g].version, rows, moved, wm)
            if d.move_in:
                vm[g] = WinnerState()
        else:
            return
        won |= _won(decided)
        status[g] = after(status[g], d, decided.next_due_ms)

    for b, batch in enumerate(batches):
        for g in range(GROUPS):
            rows = [r for _, r in batch if _group(r) == g]
            start_on_workers, switches = owners[b % len(owners)][g]
            cut = len(rows) // 2 if switches else len(rows)
            on_workers = [start_on_workers] * cut + [start_on_workers != switches] * (len(rows) - cut)
            local = [r for r, w in zip(rows, on_workers, strict=True) if not w]
            stashed = [r for r, w in zip(rows, on_workers, strict=True) if w]
            run_group(g, local, stashed, watermark)
        if batch:
            watermark = max(watermark, max(t for t, _ in batch) * 1000)
    for g in range(GROUPS):
        run_group(g, [], [], END_MS)
    return won


owners = st.lists(
    st.lists(st.tuples(st.booleans(), st.booleans()), min_size=GROUPS, max_size=GROUPS),
    min_size=1,
    max_size=6,
)


@settings(max_examples=80, deadline=None)
@given(
    auctions=auctions,
    bids=bids,
    cuts=st.lists(st.integers(0, 35), max_size=6),
    owners=owners,
    kills=st.lists(st.booleans(), min_size=1, max_size=5),
)
def test_any_schedule_of_switches_decides_the_brute_force_winners(
    auctions: list[tuple[int, int, int, int]],
    bids: list[tuple[int, int, int]],
    cuts: list[int],
    owners: list[list[tuple[bool, bool]]],
    kills: list[bool],
) -> None:
    batches = _cut(_rows(auctions, bids), cuts)
    assert _run(batches, owners, kills) == _brute_force(auctions, bids)


# ---- the rule's edge cases ----------------------------------------------------------------------


def test_a_group_whose_state_arrives_after_its_records_runs_where_the_records_wait() -> None:
    """The VM holds the group and its records were stashed for workers (the plan moved it mid-batch):
    the seal carries the VM's state and the VM's rows of the batch, so nothing waits for anything."""
    assert decide(GroupState(), local_rows=True, stashed=True, watermark_ms=0) == Decision(
        Where.WORKERS, move_in=True, forward=True
    )
    held = GroupState(on_workers=True, version=3, next_due_ms=50)
    assert decide(held, local_rows=True, stashed=False, watermark_ms=0) == Decision(Where.VM, hand_back=True)
    assert after(held, Decision(Where.VM, hand_back=True), None) == GroupState(False, 4, None)


def test_a_group_moved_twice_never_reuses_a_version() -> None:
    g = GroupState()
    seen = []
    for local, stashed in ((False, True), (True, False), (False, True), (True, False)):
        d = decide(g, local_rows=local, stashed=stashed, watermark_ms=0)
        g = after(g, d, None)
        seen.append(g.version)
    assert seen == [1, 2, 3, 4]  # a seal from a version the agent stored before a hand-back is never asked


def test_an_empty_group_held_by_workers_costs_nothing_until_something_is_due() -> None:
    held = GroupState(on_workers=True, version=1, next_due_ms=None)
    assert decide(held, local_rows=False, stashed=False, watermark_ms=END_MS).where is Where.IDLE
    due = GroupState(on_workers=True, version=1, next_due_ms=100)
    assert decide(due, local_rows=False, stashed=False, watermark_ms=99).where is Where.IDLE
    assert decide(due, local_rows=False, stashed=False, watermark_ms=100) == Decision(Where.WORKERS)


def test_a_seal_asked_again_answers_the_same() -> None:
    rows = [r for _, r in _rows([(1, 0, 10, 5)], [(1, 2, 7)])]
    agent = Agent()
    first, again = (agent.seal(1, 0, rows, None, 0) for _ in range(2))
    assert first.state.open is not None and again.state.open is not None
    assert first.state.open.equals(again.state.open) and first.next_due_ms == again.next_due_ms


def test_a_seal_crosses_the_wire_whole() -> None:
    state = {"open": pl.DataFrame({"a": [1]}), "pending": None}
    parts = {"bid": pl.DataFrame({"b": [2, 3]})}
    got = read_request(seal_request(state, parts, pl.DataFrame({"c": [4]}), 77))
    assert got[0]["open"].equals(state["open"]) and got[0]["pending"] is None
    assert got[1]["bid"].equals(parts["bid"]) and got[2] is not None and got[2]["c"].to_list() == [4]
    assert got[3] == 77
    frames, out, due = read_answer(seal_answer(state, pl.DataFrame({"w": [5]}), None))
    assert (
        set(frames) == {"open", "pending"} and out is not None and out["w"].to_list() == [5] and due is None
    )

"""The agent's store for worker-held key groups: stashed chunks and state versions survive a restart,
writing twice is harmless, and only versions no committed state can name are dropped."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest

from core.errors import InputError
from merge.keyed_groups import GROUP
from router.handoff_store import ChunkRef, HandoffStore


def _records(groups: list[int]) -> pa.Table:
    return pa.table({"id": list(range(len(groups))), GROUP: pa.array(groups, pa.int16())})


def test_a_stashed_chunk_gives_each_group_its_records_also_after_a_restart(tmp_path: Path) -> None:
    ref = ChunkRef("bid", 100, 200, 0)
    HandoffStore(tmp_path).stash(ref, _records([3, 5, 3, 7]))
    again = HandoffStore(tmp_path)  # a new agent process over the same directory
    assert again.records(ref, [3])["id"].to_pylist() == [0, 2]
    assert again.records(ref, [9]).num_rows == 0 and again.records(ref, [5, 7])["id"].to_pylist() == [1, 3]


def test_stashing_twice_keeps_the_first_write(tmp_path: Path) -> None:
    store, ref = HandoffStore(tmp_path), ChunkRef("bid", 0, 10, 1)
    store.stash(ref, _records([1]))
    store.stash(ref, _records([1, 1]))  # a retried task: the same offsets, the same records
    assert HandoffStore(tmp_path).records(ref, [1]).num_rows == 1


def test_a_chunk_without_groups_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=GROUP):
        HandoffStore(tmp_path).stash(ChunkRef("bid", 0, 1, 0), pa.table({"id": [1]}))


def test_state_versions_keep_the_last_two_of_each_group_also_when_sealed_together(tmp_path: Path) -> None:
    store = HandoffStore(tmp_path)
    assert store.state("w6", 4, 0) is None  # a group starts empty
    store.put_states("w6", {4: 1, 5: 1}, pa.table({"v": [41, 51]}))  # one seal of two groups
    for v in (2, 3):
        store.put_states("w6", {4: v}, pa.table({"v": [40 + v]}))
    again = HandoffStore(tmp_path)  # a new agent process over the same directory
    for st in (store, again):
        assert st.state("w6", 4, 3)["v"].to_pylist() == [43]
        assert st.state("w6", 4, 2)["v"].to_pylist() == [42]  # a replayed batch may still start from v2
        assert st.state("w6", 5, 1)["v"].to_pylist() == [41, 51]  # group 5's only version: kept
    store.put_states("w6", {5: 2}, pa.table({"v": [52]}))
    store.put_states("w6", {5: 3}, pa.table({"v": [53]}))  # now no group needs the first seal's file
    assert len(list((tmp_path / "state" / "w6").glob("*.arrow"))) == 4  # 4@2, 4@3, 5@2, 5@3
    with pytest.raises(KeyError, match="v1"):
        HandoffStore(tmp_path).state("w6", 5, 1)


def test_a_repeated_seal_writes_the_same_file(tmp_path: Path) -> None:
    store = HandoffStore(tmp_path)
    store.put_states("w6", {4: 1, 5: 1}, pa.table({"v": [1]}))
    store.put_states("w6", {5: 1, 4: 1}, pa.table({"v": [1]}))  # a retried task asks the same seal
    assert len(list((tmp_path / "state" / "w6").glob("*.arrow"))) == 1


def test_a_missing_chunk_is_named(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="bid-0-1-0"):
        HandoffStore(tmp_path).records(ChunkRef("bid", 0, 1, 0), [1])


@pytest.mark.parametrize(
    ("entity", "start", "end", "seq"),
    [
        ("../../etc", 0, 1, 0),
        ("bid/..", 0, 1, 0),
        ("", 0, 1, 0),
        ("bid", 5, 4, 0),
        ("bid", -1, 4, 0),
        ("bid", 0, 4, -1),
    ],
)
def test_a_chunk_that_would_name_a_file_outside_the_store_is_refused(
    entity: str, start: int, end: int, seq: int
) -> None:
    with pytest.raises(InputError):
        ChunkRef(entity, start, end, seq)

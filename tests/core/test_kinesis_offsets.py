"""The Kinesis source's batch ends (core/kinesis.py `next_shards`): cut at a common event-time horizon,
so no record read later is behind a batch's watermark, and ended only once every shard's marker is in;
each shard's records counted, so a record's ordinal (its routing unit) is the same for every reader."""

from __future__ import annotations

import pytest

from core.kinesis import (
    SHARD_SHIFT,
    Seen,
    next_shards,
    shard_number,
    shard_of_unit,
    shard_units,
    start_position,
)

EMPTY = start_position()


def seen(*times: int, end: bool = False) -> list[Seen]:
    records = [Seen(str(100 + i), t) for i, t in enumerate(times)]
    return [*records, Seen(str(100 + len(times)), None, end=True)] if end else records


def test_each_shard_is_cut_before_the_slowest_shards_latest_time() -> None:
    state = next_shards({"a": dict(EMPTY), "b": dict(EMPTY)}, {"a": seen(1, 2, 3, 9), "b": seen(1, 5)})
    # b's latest time is 5: a keeps 1, 2, 3 (9 would put the watermark past b's records to come)
    assert state["a"] == {"seq": "102", "time": 3, "ended": False, "n": 3}
    assert state["b"] == {"seq": "100", "time": 1, "ended": False, "n": 1}  # 5 waits, as the horizon itself


def test_a_shard_without_any_event_time_holds_everything_back() -> None:
    state = next_shards({"a": dict(EMPTY), "b": dict(EMPTY)}, {"a": seen(1, 2), "b": []})
    assert state["a"]["seq"] is None and state["b"]["seq"] is None


def test_an_idle_shard_keeps_its_last_time() -> None:
    start = {"a": dict(EMPTY), "b": {"seq": "7", "time": 4, "ended": False, "n": 8}}
    state = next_shards(start, {"a": seen(1, 3, 4, 6), "b": []})
    assert state["a"]["seq"] == "101" and state["b"]["seq"] == "7"
    assert state["a"]["n"] == 2 and state["b"]["n"] == 8


def test_markers_end_the_stream_only_when_every_shard_has_one() -> None:
    start = {"a": dict(EMPTY), "b": dict(EMPTY)}
    partly = next_shards(start, {"a": seen(1, 2, end=True), "b": seen(1, 3)})
    assert not partly["a"]["ended"] and partly["a"]["seq"] == "101"  # a's records below b's 3
    assert partly["b"]["seq"] == "100"
    done = next_shards(partly, {"a": seen(end=True), "b": seen(3, end=True)})
    assert done["a"]["ended"] and done["b"] == {"seq": "101", "time": 3, "ended": True, "n": 3}
    assert done["a"]["n"] == 3  # two records and the marker


def test_a_shard_found_by_a_later_listing_starts_empty() -> None:
    state = next_shards({"a": {"seq": "5", "time": 2, "ended": True, "n": 6}}, {"c": seen(7, end=True)})
    assert state["c"] == {"seq": "101", "time": 7, "ended": True, "n": 2}


def test_an_unbounded_reads_marker_is_counted_and_read_past() -> None:
    """Unbounded, `scan` gives a marker as a record without an event time: it holds nothing back, and
    it is counted as the routed read counts it (by its position in the range)."""
    state = next_shards(
        {"a": dict(EMPTY)}, {"a": [Seen("100", 1), Seen("101", None), Seen("102", 2), Seen("103", 3)]}
    )
    assert state["a"] == {"seq": "102", "time": 2, "ended": False, "n": 3}


def test_each_shard_has_its_own_units() -> None:
    assert shard_number("shardId-000000000007") == 7
    units = shard_units("shardId-000000000007", 10, 5)
    assert (units.start, units.stop) == ((7 << SHARD_SHIFT) + 10, (7 << SHARD_SHIFT) + 15)
    assert shard_of_unit(units.start) == shard_of_unit(units.stop - 1) == 7
    assert shard_of_unit(12_345) == 0  # the generator's events and the file source's files


@pytest.mark.parametrize("name", ["shard-a", "shardId-99999999999"])
def test_a_shard_named_otherwise_gets_a_stable_number_within_int64(name: str) -> None:
    number = shard_number(name)
    assert number == shard_number(name) and 0 <= number < 1 << 22
    assert shard_units(name, (1 << SHARD_SHIFT) - 1, 1).stop <= 1 << 63

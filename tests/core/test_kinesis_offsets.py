"""The Kinesis source's batch ends (core/kinesis.py `next_shards`): cut at a common event-time horizon,
so no record read later is behind a batch's watermark, and ended only once every shard's marker is in."""

from __future__ import annotations

from core.kinesis import Seen, next_shards

EMPTY = {"seq": None, "time": None, "ended": False}


def seen(*times: int, end: bool = False) -> list[Seen]:
    records = [Seen(str(100 + i), t) for i, t in enumerate(times)]
    return [*records, Seen(str(100 + len(times)), None, end=True)] if end else records


def test_each_shard_is_cut_before_the_slowest_shards_latest_time() -> None:
    state = next_shards({"a": dict(EMPTY), "b": dict(EMPTY)}, {"a": seen(1, 2, 3, 9), "b": seen(1, 5)})
    # b's latest time is 5: a keeps 1, 2, 3 (9 would put the watermark past b's records to come)
    assert state["a"] == {"seq": "102", "time": 3, "ended": False}
    assert state["b"] == {"seq": "100", "time": 1, "ended": False}  # 5 waits, as the horizon itself


def test_a_shard_without_any_event_time_holds_everything_back() -> None:
    state = next_shards({"a": dict(EMPTY), "b": dict(EMPTY)}, {"a": seen(1, 2), "b": []})
    assert state["a"]["seq"] is None and state["b"]["seq"] is None


def test_an_idle_shard_keeps_its_last_time() -> None:
    start = {"a": dict(EMPTY), "b": {"seq": "7", "time": 4, "ended": False}}
    state = next_shards(start, {"a": seen(1, 3, 4, 6), "b": []})
    assert state["a"]["seq"] == "101" and state["b"]["seq"] == "7"


def test_markers_end_the_stream_only_when_every_shard_has_one() -> None:
    start = {"a": dict(EMPTY), "b": dict(EMPTY)}
    partly = next_shards(start, {"a": seen(1, 2, end=True), "b": seen(1, 3)})
    assert not partly["a"]["ended"] and partly["a"]["seq"] == "101"  # a's records below b's 3
    assert partly["b"]["seq"] == "100"
    done = next_shards(partly, {"a": seen(end=True), "b": seen(3, end=True)})
    assert done["a"]["ended"] and done["b"] == {"seq": "101", "time": 3, "ended": True}


def test_a_shard_found_by_a_later_listing_starts_empty() -> None:
    state = next_shards({"a": {"seq": "5", "time": 2, "ended": True}}, {"c": seen(7, end=True)})
    assert state["c"] == {"seq": "101", "time": 7, "ended": True}

"""The routing log: every source offset is routed by one plan, the same for every reader and replay."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from core.offload_plan import OffloadPlan
from router.routing_log import (
    RoutingLog,
    Segment,
    covering,
    read_current_plan,
    routed_mask,
    write_current_plan,
)

LOCAL = OffloadPlan.local(0)
HALF = OffloadPlan(version=1, share=0.5, workers=2)
ALL = OffloadPlan(version=2, share=1.0, workers=2)


def test_a_plan_change_applies_from_the_first_offset_nobody_has_routed(tmp_path: Path) -> None:
    vm_share, workers_share = RoutingLog(tmp_path, "bid"), RoutingLog(tmp_path, "bid")  # two processes
    assert vm_share.plan_range(0, 1000, HALF) == (Segment(0, HALF),)
    # The plan changes while the other reader still has [0, 1000) to read: it must see HALF there.
    assert workers_share.plan_range(0, 1000, ALL) == (Segment(0, HALF),)
    assert vm_share.plan_range(1000, 2000, ALL) == (Segment(1000, ALL),)
    assert workers_share.plan_range(1000, 2000, LOCAL) == (Segment(1000, ALL),)
    # A replay of an epoch gets what the first attempt got, whatever the current plan says.
    assert RoutingLog(tmp_path, "bid").plan_range(500, 1500, LOCAL) == (Segment(0, HALF), Segment(1000, ALL))
    assert RoutingLog(tmp_path, "bid").high_water_mark() == 2000
    assert RoutingLog.streams(tmp_path) == ["bid"]


def test_streams_are_logged_apart(tmp_path: Path) -> None:
    RoutingLog(tmp_path, "bid").plan_range(0, 100, HALF)
    assert RoutingLog(tmp_path, "person").plan_range(0, 100, ALL) == (Segment(0, ALL),)


def test_the_current_plan_file_round_trips(tmp_path: Path) -> None:
    write_current_plan(tmp_path, HALF)
    assert read_current_plan(tmp_path) == HALF


def test_covering_picks_the_segments_that_route_some_offset() -> None:
    segs = [Segment(0, LOCAL), Segment(100, HALF), Segment(200, ALL)]
    assert covering(segs, 0, 100) == (segs[0],)
    assert covering(segs, 99, 101) == (segs[0], segs[1])
    assert covering(segs, 250, 300) == (segs[2],)


@settings(max_examples=50, deadline=None)
@given(
    cuts=st.lists(st.integers(0, 5000), min_size=1, max_size=5, unique=True),
    shares=st.lists(st.sampled_from([0.0, 0.3, 1.0]), min_size=6, max_size=6),
)
def test_the_two_shares_partition_the_records(cuts: list[int], shares: list[float]) -> None:
    starts = sorted(set(cuts) | {0})
    segs = [Segment(s, OffloadPlan(version=i, share=shares[i], workers=1)) for i, s in enumerate(starts)]
    ids = np.arange(0, 6000, dtype=np.int64)
    mask = routed_mask(segs, ids)
    again = routed_mask(segs, ids[::-1])[::-1]
    assert np.array_equal(mask, again)  # a pure function of the record, not of its position
    for i, seg in enumerate(segs):
        stop = segs[i + 1].start if i + 1 < len(segs) else 6000
        part = mask[seg.start : stop]
        if seg.plan.share == 0.0:
            assert not part.any()
        elif seg.plan.share == 1.0:
            assert part.all()

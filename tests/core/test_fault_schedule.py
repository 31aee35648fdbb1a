"""Seeded fault schedules replay from their seed, use event triggers only, and stay within the run."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.fault_schedule import random_schedule
from core.fault_spec import KINDS, TASK_FAILURE, FaultSpec


@given(seed=st.integers(0, 2**32), epochs=st.integers(3, 50), chunks=st.integers(1, 50))
def test_a_schedule_replays_from_its_seed_and_fires_within_the_run(
    seed: int, epochs: int, chunks: int
) -> None:
    schedule = random_schedule(seed, epochs=epochs, chunks=chunks)
    assert schedule == random_schedule(seed, epochs=epochs, chunks=chunks)
    assert 1 <= len(schedule) <= 3 and len({s.kind for s in schedule}) == len(schedule)
    for spec in schedule:
        assert FaultSpec.parse(spec.text()) == spec  # printable, so `--inject` replays it
        assert spec.get("at") is None and spec.get("every") is None  # never the wall clock
        if spec.get("after-epoch") is not None:
            assert 1 <= spec["after-epoch"] <= epochs - 2  # a later epoch still sees the recovery
        if spec.get("after-chunks") is not None:
            assert 1 <= spec["after-chunks"] <= chunks
        if spec.get("share") is not None:
            assert spec["share"] >= 0.2


def test_kinds_can_be_left_out_and_every_kind_is_drawn_somewhere() -> None:
    kinds = tuple(k for k in KINDS if k != TASK_FAILURE)
    drawn = {s.kind for seed in range(200) for s in random_schedule(seed, epochs=8, chunks=4, kinds=kinds)}
    assert drawn == set(kinds)


def test_a_run_too_short_for_a_schedule_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 3 epochs"):
        random_schedule(1, epochs=2, chunks=4)

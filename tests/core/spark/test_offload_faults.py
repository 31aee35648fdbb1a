"""Seeded fault schedules on real offloaded runs: Spark, the VM agent process and Lambda worker
processes. Whatever fault is injected, the output equals the batch reference: nothing lost, nothing
duplicated, and the run shows the recovery each fault needs."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.fault_schedule import random_schedule
from core.fault_spec import AGENT_KILL, DRIVER_KILL, KINDS, TASK_FAILURE, parse_all
from core.nexmark.queries import QUERIES
from core.spark.offload_session import OffloadConfig
from tests.core.spark.offload_checks import checked_run

pytestmark = [pytest.mark.spark, pytest.mark.slow]

# Seeded fault schedules (core/fault_schedule.py), one per query, all triggered by events: a failing
# case names its seed and its specs, and `sponge run --inject SPEC ...` with the same seed replays it.
# Unpaced runs cut the same epochs on every machine, so `after-epoch` fires at the same offsets.
FAULT_EVENTS = 16_000
FAULT_EPOCH_EVENTS = 2_000  # six epochs or more: Q3 reads only people and auctions
# Q0 and Q1 run Q2's path (a stateless chain into the direct sink) under a subset of its faults, Q7
# Q5's (window partials merged on the VM), which has two schedules; the chaos commands (bench.chaos,
# sponge chaos) draw many more schedules.
SCHEDULE_SEEDS = {query: 40 + i for i, query in enumerate(QUERIES) if query not in ("q0", "q1", "q7")}
# Task failures need Spark's task retries and a driver kill a process of its own: both are
# tests/core/spark/test_cli_run.py's. An agent left dead is EVERYTHING's.
IN_PROCESS_KINDS = tuple(k for k in KINDS if k not in (TASK_FAILURE, DRIVER_KILL, AGENT_KILL))
EVERYTHING = (
    "kill-worker:after-chunks=3",
    "throttle:share=0.3",
    "slow-worker:share=0.2,delay=3s",
    "agent-restart:after-epoch=2",
    "agent-kill:after-epoch=3",
    "query-restart:after-epoch=4",
)


def _schedules() -> list[tuple[str, int, tuple[str, ...]]]:
    cases = [
        (q, seed, tuple(s.text() for s in random_schedule(seed, epochs=5, chunks=4, kinds=IN_PROCESS_KINDS)))
        for q, seed in SCHEDULE_SEEDS.items()
    ]
    return [*cases, ("q5", 99, EVERYTHING)]


@pytest.mark.parametrize(
    ("query", "seed", "faults"), _schedules(), ids=[f"{q}-seed{s}-{'+'.join(f)}" for q, s, f in _schedules()]
)
def test_output_equals_reference_under_a_fault_schedule(
    spark, tmp_path: Path, query: str, seed: int, faults: tuple[str, ...]
) -> None:
    specs = parse_all(faults)
    # A stalled worker (3 s) loses its chunk after 1 s: the stall costs the run one second, not two.
    offload = OffloadConfig(share=0.5, workers=2, faults=specs, chunk_rows=500, chunk_timeout_s=1.0)
    summary = checked_run(
        tmp_path, query, seed, offload, FAULT_EVENTS, pace=False, epoch_events=FAULT_EPOCH_EVENTS
    )

    # Each fault happened, as often as its trigger says, and the run shows the recovery it needs.
    injected = summary["injected_faults"]
    expected_kinds = {spec.kind for spec in specs}
    assert set(injected) == expected_kinds, (faults, summary)
    for spec in specs:
        once = spec.get("after-epoch") is not None or spec.get("after-chunks") is not None
        assert injected[spec.kind] == 1 if once else injected[spec.kind] >= 1, (spec.text(), summary)
    assert summary["agent_restarts"] == injected.get("agent-restart", 0)
    assert summary["agent_crashes_recovered"] == injected.get("agent-kill", 0)  # its launcher restarted it
    if "slow-worker" in injected:
        assert summary["chunk_timeouts"] >= 1
    if "throttle" in injected:
        assert summary["throttles"] >= injected["throttle"]
    assert summary["records_offloaded"] > 0

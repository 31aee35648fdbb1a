"""The chaos tally sums what the checker counted and names each failing schedule's replay command."""

from __future__ import annotations

import pyarrow as pa

from core.chaos_tally import ScheduleOutcome, Tally
from core.results import check_records


def test_failing_schedules_are_summed_and_named_with_the_command_that_replays_them() -> None:
    expected = pa.table({"k": [1, 2, 3]})
    tally = Tally(replay="chaos --schedules 1 --seed {seed}")
    same = check_records(expected, expected)
    tally.add(ScheduleOutcome.checked(7, ("kill-worker:after-chunks=2",), same, 1.0))
    broken = pa.table({"k": [1, 1, 9]})
    tally.add(ScheduleOutcome.checked(8, ("partition@2", "delay@0"), check_records(broken, expected), 3.0))
    tally.add(ScheduleOutcome(9, ("agent-kill@1",), seconds=2.0, error="timed out"))
    report = tally.report()
    assert (report["schedules"], report["failed"]) == (3, 2)
    assert (report["lost"], report["duplicated"], report["unexpected"]) == (2, 1, 1)
    assert report["fault_mix"] == {"agent-kill": 1, "delay": 1, "kill-worker": 1, "partition": 1}
    assert [f["seed"] for f in report["failing"]] == [8, 9]
    assert report["failing"][0]["replay"] == "chaos --schedules 1 --seed 8"
    assert report["failing"][1]["error"] == "timed out"
    assert report["schedule_s_median"] == 2.0

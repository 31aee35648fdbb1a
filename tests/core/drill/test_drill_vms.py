"""A real (short) VMBase drill: the burst is detected by Sponge's trigger, a "VM" (a standalone worker on
the worker core) is asked for, its executor registers with the running query and takes tasks (state
reloaded from the checkpoint), and the output still equals the batch reference."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.cli.main import app

pytestmark = [pytest.mark.solo, pytest.mark.spark, pytest.mark.slow]

LEAD_S = 12  # the query's first, slow epochs stay before the burst


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="the added VM is pinned to the second core")
def test_a_short_vmbase_drill_adds_a_vm_whose_executor_takes_tasks(tmp_path: Path) -> None:
    report = tmp_path / "drill"
    result = CliRunner().invoke(
        app,
        [
            "drill",
            "--compare",
            "vmbase",
            "--pattern",
            "sudden:4x:10s",
            "--duration",
            "30",
            "--lead",
            str(LEAD_S),
            "--rate",
            "2500",
            "--vm-launch-delay",
            "2",
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    (run,) = json.loads((report / "report.json").read_text())["runs"]
    child = json.loads((report / "vmbase" / "result.json").read_text())
    print(f"\n{run['notes']}\nvm_cores: {run['vm_cores_by_second']}")
    assert run["results_match_reference"] is True

    # One request, at Sponge's own trigger: the first decision that would offload. The burst's onset
    # fires it within seconds; on this shared machine a stable second can fire it first (epochs run
    # back to back, so the VM's CPU reads ~0.8 at any rate and the CPU trigger is then a coin toss).
    (action,) = child["vm_actions"]
    log = (report / "vmbase" / "output-decisions.jsonl").read_text().splitlines()[1:]
    decisions = [json.loads(line)["decision"] for line in log]
    fired = [d for d in decisions if d["trigger"] != "hold" and d["share"] > 0]
    assert action["add"] == 1 and action["t"] == pytest.approx(fired[0]["t"], abs=0.01)
    fired_at_onset = [d for d in fired if LEAD_S <= d["t"] <= LEAD_S + 3]
    assert fired_at_onset, "the burst's onset did not fire the policy's trigger"
    # Either alternative is accepted: the onset asked for the VM, or a stable second did first (the onset
    # then fired the trigger again, checked just above, and the one request stands).
    asked_at_onset = LEAD_S <= action["t"] <= LEAD_S + 3
    asked_before_onset = action["t"] < LEAD_S
    assert asked_at_onset or asked_before_onset, (
        f"the VM was asked for at {action['t']:.1f} s ({fired[0]['trigger']}): neither before the onset "
        f"at {LEAD_S} s nor within 3 s of it"
    )
    base, added = child["vms"]
    assert base["base"] and not added["base"] and not added["warm"]
    assert added["requested_s"] == pytest.approx(action["t"], abs=0.5)
    assert added["worker_launched_s"] - added["requested_s"] >= 2.0  # the VM "booted" first
    assert added["usable_s"] is not None and added["usable_s"] > added["worker_registered_s"]

    cores = run["vm_cores_by_second"]
    assert cores[0] == 1 and 2 in cores  # the monitor saw the second VM's core
    became = cores.index(2)
    assert became >= int(added["usable_s"]) and all(c == 2 for c in cores[became:])
    if added["usable_s"] >= LEAD_S:
        assert run["reaction_s"] == pytest.approx(added["usable_s"] - LEAD_S, abs=0.01)
    else:  # the VM was usable before the burst began: there is no reaction to the burst to measure
        assert run["reaction_s"] is None

    executors = {e["vm"]: e for e in child["executors"]}
    assert set(executors) == {0, 1}
    assert executors[1]["completed_tasks"] > 0 and executors[0]["completed_tasks"] > 0  # tasks ran on both
    assert run["offload_share_by_second"] == [0.0] * 30  # no offload plan was published
    assert run["records_offloaded"] == 0
    assert not child["loop_errors"]

"""A real (short) drill: the sponge policy in its own pinned process, live plans, the report written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.cli.main import app

pytestmark = [pytest.mark.solo, pytest.mark.spark, pytest.mark.slow]

LEAD_S = 25  # long enough for the run to reach its steady state before the burst


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a drill pins the VMs and the workers to separate cores"
)
def test_a_short_sponge_drill_waits_for_a_steady_run_offloads_the_burst_and_matches_the_reference(
    tmp_path: Path,
) -> None:
    report = tmp_path / "drill"
    result = CliRunner().invoke(
        app,
        [
            "drill",
            "--compare",
            "sponge",
            "--pattern",
            "sudden:3x:8s",
            "--duration",
            str(LEAD_S + 20),
            "--lead",
            str(LEAD_S),
            "--rate",
            "12000",
            "--report",
            str(report),
        ],
    )
    assert result.exit_code == 0, result.output
    data = json.loads((report / "report.json").read_text())
    (run,) = data["runs"]
    assert run["policy"] == "sponge"
    assert run["results_match_reference"] is True
    assert run["records_offloaded"] > 0  # the policy reacted to the burst and workers took records
    assert run["reaction_s"] is not None
    assert len(run["p99_ms_by_second"]) == LEAD_S + 20
    rates = data["rate_by_second"]
    assert rates[0] < 0.5 * rates[LEAD_S - 1], "the lead-in ramps up, so the new query starts level"
    assert (report / "report.md").exists() and (report / "latency.png").exists()
    assert run["deployment"]["spark"] == "standalone" and run["deployment"]["vm_cores"] == 1
    # The policy decided nothing until the run was steady, and nothing was offloaded before the onset.
    assert run["steady_s"] is not None and run["steady_s"] < LEAD_S, run["steady_s"]
    log = (report / "sponge" / "output-decisions.jsonl").read_text().splitlines()[1:]
    decisions = [json.loads(line)["decision"] for line in log]
    assert len(decisions) > 10  # one per second once armed
    assert decisions[0]["t"] >= run["steady_s"] - 1.0  # a sample's time is its second's start
    early = [d for d in decisions if d["t"] < LEAD_S and d["share"] > 0]
    assert not early, f"offloaded before the onset at {LEAD_S} s: {early}"
    assert run["before_onset"] == {"max_share": 0.0, "worker_seconds": 0.0}

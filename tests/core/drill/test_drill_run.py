"""A real (short) drill: the sponge policy in its own pinned process, live plans, the report written."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.cli.main import app

pytestmark = [pytest.mark.spark, pytest.mark.slow]


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a drill pins the VMs and the workers to separate cores"
)
def test_a_short_sponge_drill_offloads_the_burst_and_matches_the_reference(tmp_path: Path) -> None:
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
            "30",
            "--lead",
            "15",
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
    assert len(run["p99_ms_by_second"]) == 30
    assert (report / "report.md").exists() and (report / "latency.png").exists()
    decisions = (report / "sponge" / "output-decisions.jsonl").read_text().splitlines()
    assert len(decisions) > 10  # one per second, with the config first

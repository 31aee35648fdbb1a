"""A real one-cell drill matrix through the console script, its cell a short sponge drill: the policy
waits for a steady run (or for the burst, if the run never settles), offloads nothing before the onset
and the burst after it, the output matches the reference; the table, JSON and heat-map are written, and
a second run keeps the cell."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.solo, pytest.mark.spark, pytest.mark.slow]

SPONGE = str(Path(sys.executable).parent / "sponge")
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
LEAD_S = 25  # long enough for the run to reach its steady state before the burst
DURATION_S = LEAD_S + 20
PATTERN = "sudden:3x:8s"
# Set by hand (no calibration probes), and low: a stable rate stays stable on a machine several times
# slower than usual, and the policy, whose capacity then comes from this rate, still sees the burst.
RATE = 4_000


def _matrix(out: Path) -> subprocess.CompletedProcess[str]:
    args = [
        SPONGE,
        "drill-matrix",
        "--queries",
        "q1",
        "--patterns",
        PATTERN,
        "--compare",
        "sponge",  # the baselines' ratios are the fast lane's (tests/core/drill/test_matrix.py)
        "--duration",
        str(DURATION_S),
        "--lead",
        str(LEAD_S),
        "--rate",
        str(RATE),
        "--report",
        str(out),
        "--json",
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=840)


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a drill pins the VMs and the workers to separate cores"
)
def test_a_one_cell_matrix_of_a_steady_sponge_drill_offloads_the_burst_only_and_resumes(
    tmp_path: Path,
) -> None:
    out = tmp_path / "matrix"
    result = _matrix(out)
    assert result.returncode == 0, result.stderr[-3000:]
    matrix = json.loads(result.stdout.strip().splitlines()[-1])  # --json: the last line is the contract
    assert matrix == json.loads((out / "matrix.json").read_text())
    (cell,) = matrix["cells"]
    assert (cell["cell"], cell["pattern"], cell["state"]) == ("q1-sudden", PATTERN, "done")
    assert cell["exact"] is True and matrix["exact"] is True and matrix["complete"]
    assert set(cell["cost_usd"]) == {"sponge"}
    assert f"| q1-sudden | {PATTERN} | {RATE:,} |" in (out / "matrix.md").read_text()
    png = (out / "matrix.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 10_000

    report = out / "q1-sudden"
    assert (report / "report.md").exists() and (report / "latency.png").exists()
    data = json.loads((report / "report.json").read_text())
    (run,) = data["runs"]
    assert run["policy"] == "sponge" and run["results_match_reference"] is True
    assert run["records_offloaded"] > 0  # the policy reacted to the burst and workers took records
    assert run["reaction_s"] is not None
    assert len(run["p99_ms_by_second"]) == DURATION_S
    rates = data["rate_by_second"]
    assert rates[0] < 0.5 * rates[LEAD_S - 1], "the lead-in ramps up, so the new query starts level"
    assert run["deployment"]["spark"] == "standalone" and run["deployment"]["vm_cores"] == 1
    # The policy decided nothing until the run was steady, or, on a machine too slow for the run to
    # settle in the lead-in (CI's has run 4-10x slower than usual), until the burst's onset.
    log = (report / "sponge" / "output-decisions.jsonl").read_text().splitlines()[1:]
    decisions = [json.loads(line)["decision"] for line in log]
    assert len(decisions) > 10  # one per second once armed
    steady_s = run["steady_s"]
    if steady_s is not None and steady_s < LEAD_S:
        assert decisions[0]["t"] >= steady_s - 1.0  # a sample's time is its second's start
    else:
        assert "did not reach a steady state before the onset" in (report / "report.md").read_text()
        assert decisions[0]["t"] >= LEAD_S
    # Nothing was offloaded before the onset either way.
    early = [d for d in decisions if d["t"] < LEAD_S and d["share"] > 0]
    assert not early, f"offloaded before the onset at {LEAD_S} s: {early}"
    assert run["before_onset"] == {"max_share": 0.0, "worker_seconds": 0.0}

    started = time.monotonic()
    again = _matrix(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "q1-sudden: done before, kept" in again.stderr
    assert time.monotonic() - started < 60  # nothing ran: no Spark start-up
    assert json.loads(again.stdout.strip().splitlines()[-1])["cells"] == matrix["cells"]

"""A real (one-cell) drill matrix through the console script: the drill runs, the table, JSON and
heat-map are written, every output matches the reference, and a second run keeps the cell."""

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


def _matrix(out: Path) -> subprocess.CompletedProcess[str]:
    args = [
        SPONGE,
        "drill-matrix",
        "--queries",
        "q1",
        "--patterns",
        "sudden",
        "--compare",
        "sponge,noscaling",
        "--duration",
        "24",
        "--lead",
        "8",  # a matrix's mechanics, not a fair drill: the policy is armed at the onset
        "--rate",
        "20000",  # no calibration probes
        "--report",
        str(out),
        "--json",
    ]
    return subprocess.run(args, capture_output=True, text=True, timeout=840)


@pytest.mark.skipif(
    len(os.sched_getaffinity(0)) < 2, reason="a drill pins the VMs and the workers to separate cores"
)
def test_a_one_cell_matrix_writes_its_table_json_and_heatmap_and_resumes(tmp_path: Path) -> None:
    out = tmp_path / "matrix"
    result = _matrix(out)
    assert result.returncode == 0, result.stderr[-3000:]
    matrix = json.loads(result.stdout.strip().splitlines()[-1])  # --json: the last line is the contract
    assert matrix == json.loads((out / "matrix.json").read_text())
    (cell,) = matrix["cells"]
    assert (cell["cell"], cell["pattern"], cell["state"]) == ("q1-sudden", "sudden:2x:8s", "done")
    assert cell["exact"] is True and matrix["exact"] is True and matrix["complete"]
    assert set(cell["cost_usd"]) == {"sponge", "noscaling"}
    assert (out / "q1-sudden" / "report.md").exists() and (out / "q1-sudden" / "report.json").exists()
    assert "| q1-sudden | sudden:2x:8s | 20,000 |" in (out / "matrix.md").read_text()
    png = (out / "matrix.png").read_bytes()
    assert png[:8] == PNG_MAGIC and len(png) > 10_000

    started = time.monotonic()
    again = _matrix(out)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "q1-sudden: done before, kept" in again.stderr
    assert time.monotonic() - started < 60  # nothing ran: no Spark start-up
    assert json.loads(again.stdout.strip().splitlines()[-1])["cells"] == matrix["cells"]

"""`sponge run`, `sponge reference` and `sponge events` end to end, as a user calls them."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from core.results import diff_results, read_results

pytestmark = pytest.mark.spark
SPONGE = [sys.executable, "-c", "from core.cli import main; main()"]


def sponge(*args: str) -> subprocess.CompletedProcess[str]:
    p = subprocess.run([*SPONGE, *args], capture_output=True, text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def test_run_equals_reference_through_the_cli(tmp_path: Path) -> None:
    common = ["--events", "30000", "--seed", "3", "--window-size", "2", "--window-slide", "1"]
    sponge("run", "q7", *common, "--batch-events", "8000", "--output", str(tmp_path / "run"))
    sponge("reference", "q7", *common, "--output", str(tmp_path / "ref"))
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["records_in"] == 27_600 and summary["records_offloaded"] == 0 and summary["epochs"] >= 4
    assert {"records_in", "records_local", "records_offloaded", "epochs", "wall_s"} <= set(summary)
    expected = read_results(tmp_path / "ref")
    assert expected.num_rows > 0
    assert diff_results(read_results(tmp_path / "run"), expected) is None


def test_events_writes_one_file_set_per_entity(tmp_path: Path) -> None:
    sponge("events", "--events", "5000", "--seed", "1", "--output", str(tmp_path))
    rows = {e: pq.read_table(tmp_path / e).num_rows for e in ("person", "auction", "bid")}
    assert rows == {"person": 100, "auction": 300, "bid": 4600}
    bid = pq.read_table(tmp_path / "bid")
    assert {"event_id", "arrival_time", "date_time", "price"} <= set(bid.column_names)

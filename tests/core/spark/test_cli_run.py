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
SPONGE = [sys.executable, "-c", "from core.cli.main import main; main()"]


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


def test_an_offloaded_run_killed_mid_handoff_resumes_from_its_checkpoint_through_the_cli(
    tmp_path: Path,
) -> None:
    common = ["--events", "16000", "--seed", "4"]
    # Two seals at once per task and batch (the default is one): the resumed run must equal the reference too.
    run = [*common, "--batch-events", "4000", "--offload-share", "0.5", "--workers", "2", "--subscales", "2"]
    out = tmp_path / "run"
    # The driver dies outright once epoch 1 has committed, while workers hold Q4's key groups.
    killed = subprocess.run(
        [*SPONGE, "run", "q4", *run, "--inject", "driver-kill:after-epoch=1", "--output", str(out)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert not (out / "summary.json").exists()
    assert any((out / "_offload" / "handoff" / "state").iterdir())  # groups' states the workers held
    # Without --resume the run is refused and left as it is.
    again = subprocess.run([*SPONGE, "run", "q4", *run, "--output", str(out)], capture_output=True, text=True)
    assert again.returncode == 2 and "pass --resume" in again.stderr, again.stderr
    # Resumed, with worker and task failures on top. Task failures need the product's Spark retries
    # (local[2,4]), which the in-process session lacks.
    faults = ["--inject", "kill-worker:after-chunks=2", "--inject", "task-failure:share=0.3"]
    sponge("run", "q4", *run, *faults, "--resume", "--output", str(out))
    sponge("reference", "q4", *common, "--output", str(tmp_path / "ref"))
    summary = json.loads((out / "summary.json").read_text())
    assert summary["resumed"] and summary["offload_share"] == 0.5 and summary["target"] == "embedded"
    assert summary["operators_offloaded"]["winner_at_close6"] > 0 and summary["chunks_dispatched"] > 0
    assert summary["records_local"] + summary["records_routed_to_workers"] == summary["records_in"]
    injected = summary["injected_faults"]
    assert set(injected) == {"kill-worker", "task-failure"} and injected["kill-worker"] == 1, summary
    assert injected["task-failure"] >= 1
    assert diff_results(read_results(out), read_results(tmp_path / "ref")) is None


def test_events_writes_one_file_set_per_entity(tmp_path: Path) -> None:
    sponge("events", "--events", "5000", "--seed", "1", "--output", str(tmp_path))
    rows = {e: pq.read_table(tmp_path / e).num_rows for e in ("person", "auction", "bid")}
    assert rows == {"person": 100, "auction": 300, "bid": 4600}
    bid = pq.read_table(tmp_path / "bid")
    assert {"event_id", "arrival_time", "date_time", "price"} <= set(bid.column_names)


def test_file_input_sends_bad_lines_to_the_dead_letter_and_keeps_going(tmp_path: Path) -> None:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.jsonl import write_jsonl_events
    from core.nexmark.params import QueryParams
    from core.nexmark.reference import reference_for

    gen = GeneratorConfig(seed=4, events=20_000)
    write_jsonl_events(gen, tmp_path / "in", files_per_entity=3)
    first = sorted((tmp_path / "in" / "bid").glob("*.jsonl"))[0]
    with first.open("a") as f:
        f.write('{"auction": 1000, "bidder": \n')  # malformed JSON
        f.write(
            '{"auction": 1000, "bidder": 1000, "price": "cheap", "channel": "c", "url": "u", '
            '"date_time": "2026-01-01T00:00:00Z", "extra": ""}\n'
        )  # wrong type
    sponge(
        "run", "q7", "--input", str(tmp_path / "in"), "--window-size", "1", "--output", str(tmp_path / "run")
    )
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["dead_letter"]["count"] == 2
    assert summary["dead_letter"]["by_reason"] == {"malformed json": 1, "field 'price'": 1}
    expected = reference_for("q7", gen, QueryParams(window_size_s=1, window_slide_s=1))
    assert diff_results(read_results(tmp_path / "run"), expected) is None

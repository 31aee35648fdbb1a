"""A trial's input: every source of a job fed at a rate, in files its own run reads without a dead letter."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from core.errors import ConfigError
from core.job import Job
from core.spark.input_validation import read_file
from core.trial_feed import START, FeedConfig, arrival_seconds, feed
from tests.core.test_cli import assert_one_line_error, sponge

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _job() -> Job:
    job = Job("trial")
    job.source(
        "view", {"user": "int64", "page": "string", "at": "timestamp", "ms": "float64"}, event_time="at"
    )
    job.source(
        "flag", {"user": "int64", "on": "bool", "since": "timestamp"}, event_time="since", format="parquet"
    )
    return job


def test_each_source_gets_its_records_in_files_its_run_reads_whole(tmp_path: Path) -> None:
    sources = _job().sources
    counts = feed(tmp_path, sources, FeedConfig(records=1_000, rate=500.0, files=3, keys=7, seed=3))
    assert counts == {"view": 1_000, "flag": 1_000}
    assert sorted(p.name for p in (tmp_path / "flag").iterdir()) == [
        f"part-0000{i}.parquet" for i in range(3)
    ]
    tables = {}
    for name, schema in sources.items():
        batches = [
            b for f in sorted((tmp_path / name).iterdir()) for b in read_file(f, schema, tmp_path / "dl")
        ]
        tables[name] = pa.Table.from_batches(batches)
    assert not (tmp_path / "dl").exists() or not any((tmp_path / "dl").rglob("*.jsonl"))  # no dead letter
    view = tables["view"]
    assert view.num_rows == 1_000 and set(view["user"].to_pylist()) <= set(range(7))
    assert set(view["page"].to_pylist()) <= {f"k{k}" for k in range(7)}  # strings are the same keys
    seconds = (view["at"].cast(pa.int64()).to_numpy() - int(START.timestamp() * 1e6)) / 1e6
    assert np.allclose(seconds, np.round(arrival_seconds(1_000, 500.0), 6), atol=1e-6)
    assert tables["flag"].num_rows == 1_000


def test_the_burst_compresses_its_thirty_seconds_of_records() -> None:
    plain, burst = (
        arrival_seconds(10_000, 100.0),
        arrival_seconds(10_000, 100.0, burst_at=20, burst_factor=10),
    )
    assert plain[-1] == pytest.approx(100.0) and burst[-1] == pytest.approx(100.0 - 27.0, abs=0.05)
    assert np.all(np.diff(burst) > 0) and burst[2_999] - burst[2_000] == pytest.approx(1000 / 1000, rel=1e-3)


def test_the_same_seed_writes_the_same_records(tmp_path: Path) -> None:
    config = FeedConfig(records=50, files=1, seed=9)
    feed(tmp_path / "a", _job().sources, config)
    feed(tmp_path / "b", _job().sources, config)
    assert (tmp_path / "a/view/part-00000.jsonl").read_text() == (
        tmp_path / "b/view/part-00000.jsonl"
    ).read_text()


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="--files must be at least 1"):
        FeedConfig(files=0)
    with pytest.raises(ConfigError, match="--rate and --burst-factor must be positive"):
        FeedConfig(rate=0)


def test_sponge_feed_writes_a_job_files_input_and_never_replaces_one(tmp_path: Path) -> None:
    job = f"{EXAMPLES / 'site_temperatures.py'}:job"
    result = sponge("feed", job, "-o", str(tmp_path / "in"), "--records", "200", "--files", "2")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (tmp_path / "in" / "reading").iterdir()) == [
        "part-00000.jsonl",
        "part-00001.jsonl",
    ]
    before = (tmp_path / "in" / "reading" / "part-00000.jsonl").read_text()
    again = sponge("feed", job, "-o", str(tmp_path / "in"), "--records", "10")
    assert_one_line_error(again, "already exists: feeding")
    assert (tmp_path / "in" / "reading" / "part-00000.jsonl").read_text() == before
    assert_one_line_error(sponge("feed", "q5", "-o", str(tmp_path / "q")), "q5 is a NEXMark query")

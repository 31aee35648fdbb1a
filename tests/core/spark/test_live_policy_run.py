"""A live policy on a real run: the file backlog read from Spark's own progress, the status files beside
the results without disturbing them, and the run's summary."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from core.nexmark.generator import GeneratorConfig
from core.results import read_results
from core.run_status import read_status
from core.spark.live_policy import FileBacklog, LivePolicy, count_lines
from core.spark.runner import RunConfig, run_query

pytestmark = [pytest.mark.spark, pytest.mark.slow]

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def test_noscaling_watches_a_run_of_files_to_its_end(spark, tmp_path: Path) -> None:
    spec = importlib.util.spec_from_file_location("page_views_example", EXAMPLES / "page_views.py")
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    example.write_views(str(tmp_path / "in"), 4_000, rate=400.0, files=4)
    config = RunConfig(
        query=f"{EXAMPLES / 'page_views.py'}:job",
        generator=GeneratorConfig(seed=0, events=0),
        output=tmp_path / "out",
        input=tmp_path / "in",
        max_files_per_batch=1,  # several epochs, so the committed files move one by one
    )
    backlog = FileBacklog(tmp_path / "in", list(config.job().sources), follow=False)
    live = LivePolicy("noscaling", config.output, backlog, per_core_rate=1000.0, rho=5.0, max_workers=1)
    summary = run_query(config, progress=live.progress, hooks=live)

    records = sum(count_lines(p) for p in (tmp_path / "in").rglob("*.jsonl"))
    assert backlog.released() == backlog.committed() == records == summary["records_in"]
    assert summary["policy"]["name"] == "noscaling" and summary["policy"]["max_share"] == 0.0
    assert read_results(tmp_path / "out").num_rows > 0  # _status/ is not a result
    status = read_status(tmp_path / "out")
    assert status["state"] == "ended" and status["live"]["state"] == "stopped"

"""A user's own job streamed through Spark: its own schema read from its own files, its output checked
against the same computation written out in plain Python."""

from __future__ import annotations

import importlib.util
import json
from collections import defaultdict
from datetime import datetime
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

from core.errors import ConfigError
from core.nexmark.generator import GeneratorConfig
from core.results import diff_results, read_results
from core.spark.runner import RunConfig, run_query

pytestmark = pytest.mark.spark

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE = EXAMPLES / "page_views.py"
SIZE_US, SLIDE_US = 10_000_000, 2_000_000


def _example(name: str = "page_views") -> ModuleType:
    """An example job file run as a module, for the data generator it holds."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected(input_dir: Path) -> pa.Table:
    """Top 3 pages (ties kept) by views per 10 s window sliding by 2 s, over views with ms > 0."""
    counts: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for path in sorted((input_dir / "view").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            v = json.loads(line)
            if not isinstance(v.get("at"), str) or not isinstance(v.get("page"), str) or v["ms"] <= 0:
                continue  # a dead letter, or a view the filter drops
            us = _us(v["at"])
            last = us - us % SLIDE_US
            for start in range(last, us - SIZE_US, -SLIDE_US):
                c = counts[(start, v["page"])]
                c[0] += 1
                c[1] += v["ms"] / 1000
    by_window: dict[int, list[tuple[str, int, float]]] = defaultdict(list)
    for (start, page), (n, secs) in counts.items():
        by_window[start].append((page, int(n), secs))
    rows = []
    for start, pages in by_window.items():
        third = sorted((n for _, n, _ in pages), reverse=True)[:3][-1]
        rows += [(start, start + SIZE_US, p, n, s) for p, n, s in pages if n >= third]
    names = ["window_start", "window_end", "page", "views", "dwell"]
    columns = list(zip(*rows, strict=True))
    ts = pa.timestamp("us", tz="UTC")
    types = [ts, ts, pa.string(), pa.int64(), pa.float64()]
    return pa.table({n: pa.array(c, t) for n, c, t in zip(names, columns, types, strict=True)})


def test_a_jobs_own_source_runs_on_spark_and_equals_the_computation_in_python(spark, tmp_path: Path) -> None:
    _example().write_views(str(tmp_path / "in"), 12_000, rate=500.0, files=6)
    bad = tmp_path / "in" / "view" / "part-00006.jsonl"
    bad.write_text('{"user": 1, "page": "/p1", "at": null, "ms": 5}\n{"user": "x"}\n')
    config = RunConfig(
        query=f"{EXAMPLE}:job",
        generator=GeneratorConfig(seed=0, events=0),
        output=tmp_path / "out",
        input=tmp_path / "in",
    )
    summary = run_query(config)
    expected = _expected(tmp_path / "in")
    actual = read_results(tmp_path / "out")
    assert expected.num_rows > 0
    assert diff_results(actual.select(expected.column_names), expected) is None, diff_results(
        actual, expected
    )
    assert summary["job"] == "page_views" and summary["records_in"] == 12_000 + 0
    assert summary["dead_letter"]["count"] == 2 and summary["dead_letter"]["by_reason"] == {
        "field 'at'": 1,
        "field 'user'": 1,
    }


def _us(text: str) -> int:
    at = datetime.fromisoformat(text)
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def _site_temperatures(input_dir: Path) -> pa.Table:
    """Readings joined with their device's site; per site and 60 s window sliding by 10 s: count, mean
    and max temperature."""
    sites = {}
    for path in (input_dir / "device").glob("*.jsonl"):
        sites |= {d["device_id"]: d["site"] for d in map(json.loads, path.read_text().splitlines())}
    groups: dict[tuple[int, str], list[float]] = defaultdict(list)
    size, slide = 60_000_000, 10_000_000
    for path in (input_dir / "reading").glob("*.jsonl"):
        for r in map(json.loads, path.read_text().splitlines()):
            if r["device"] not in sites:
                continue
            us = _us(r["at"])
            for start in range(us - us % slide, us - size, -slide):
                groups[(start, sites[r["device"]])].append(r["temp"])
    ts = pa.timestamp("us", tz="UTC")
    keys = sorted(groups)
    return pa.table(
        {
            "window_start": pa.array([k[0] for k in keys], ts),
            "window_end": pa.array([k[0] + size for k in keys], ts),
            "site": [k[1] for k in keys],
            "readings": pa.array([len(groups[k]) for k in keys], pa.int64()),
            "avg_temp": [sum(groups[k]) / len(groups[k]) for k in keys],
            "max_temp": [max(groups[k]) for k in keys],
        }
    )


def test_a_job_joining_two_of_its_own_sources_equals_the_computation_in_python(spark, tmp_path: Path) -> None:
    _example("site_temperatures").write_readings(str(tmp_path / "in"), 9_000, devices=60, rate=300.0, files=6)
    config = RunConfig(
        query=f"{EXAMPLES / 'site_temperatures.py'}:job",
        generator=GeneratorConfig(seed=0, events=0),
        output=tmp_path / "out",
        input=tmp_path / "in",
        max_files_per_batch=2,  # the readings span several epochs; the join's state carries across them
    )
    summary = run_query(config)
    expected = _site_temperatures(tmp_path / "in")
    actual = read_results(tmp_path / "out")
    assert expected.num_rows > 0 and summary["epochs"] >= 3
    assert diff_results(actual.select(expected.column_names), expected) is None, diff_results(
        actual, expected
    )


def test_a_job_file_needs_its_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no --input was given"):
        RunConfig(
            query=f"{EXAMPLE}:job", generator=GeneratorConfig(seed=0, events=0), output=tmp_path / "out"
        )

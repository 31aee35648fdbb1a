from __future__ import annotations

from pathlib import Path

import pytest

from core.nexmark.generator import GeneratorConfig
from core.spark.runner import RunConfig, source_at_end, source_offset


def test_paths_that_travel_to_executors_are_absolute(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cluster's executors run in their worker's directory: a relative offload directory sent to a
    worker's rank service named nothing there (a routed Q5 probe failed with "no offload plan")."""
    monkeypatch.chdir(tmp_path)
    config = RunConfig(
        "q1",
        GeneratorConfig(seed=1, events=10),
        Path("runs/out"),
        capacity_file=Path("runs/out-capacity"),
    )
    assert config.output == tmp_path / "runs/out"
    assert config.capacity_file == tmp_path / "runs/out-capacity"


def test_absolute_paths_are_kept_as_given(tmp_path: Path) -> None:
    config = RunConfig("q1", GeneratorConfig(seed=1, events=10), tmp_path / "out")
    assert config.output == tmp_path / "out"
    assert config.capacity_file is None


def test_a_source_is_at_its_end_by_its_kind_of_offset_and_a_missing_offset_is_none() -> None:
    assert source_offset('{"files": 3}') == {"files": 3}
    for missing in (None, "", "null", "None"):  # JSON null as PySpark passes it on, and its older forms
        assert source_offset(missing) == {}
    total = 1_001  # a generator's punctuation sits at its events
    assert source_at_end({"endOffset": '{"event": 1001}'}, total)
    assert not source_at_end({"endOffset": '{"event": 1000}'}, total)
    files = '{"files": 4, "source": "view"}'
    assert source_at_end({"endOffset": files, "latestOffset": '{"files": 4}'}, total)
    assert not source_at_end({"endOffset": files, "latestOffset": '{"files": 5}'}, total)
    assert not source_at_end({"endOffset": files, "latestOffset": "null"}, total)  # was a TypeError
    assert source_at_end({"endOffset": '{"shards": {}, "done": true}', "latestOffset": "null"}, total)
    assert not source_at_end({"endOffset": "null", "latestOffset": "null"}, total)  # nothing read yet

from __future__ import annotations

from pathlib import Path

import pytest

from core.nexmark.generator import GeneratorConfig
from core.spark.runner import RunConfig


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

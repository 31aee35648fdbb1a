"""A run's output: claimed when new or empty, resumed only as the same job, never anyone else's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.run_output import MARKER, Existing, claim

JOB = {"query": "q4", "events": 1000, "seed": 3, "input": None, "offloaded": True}


def test_a_new_or_empty_directory_is_claimed_for_a_new_run(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    for out in (tmp_path / "new" / "run", tmp_path / "empty"):
        assert claim(out, JOB, Existing.REFUSE) is False
        assert json.loads((out / MARKER).read_text())["identity"] == JOB


@pytest.mark.parametrize("existing", list(Existing))
def test_files_sponge_did_not_write_are_refused_and_kept(tmp_path: Path, existing: Existing) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(ConfigError, match="did not write") as e:
        claim(tmp_path, JOB, existing)
    assert "new or empty directory" in e.value.hint
    assert [p.name for p in tmp_path.iterdir()] == ["notes.txt"]
    assert (tmp_path / "notes.txt").read_text() == "mine"


def test_a_file_as_output_is_refused(tmp_path: Path) -> None:
    (tmp_path / "out").write_text("x")
    with pytest.raises(ConfigError, match="is a file"):
        claim(tmp_path / "out", JOB, Existing.REFUSE)


def test_a_run_is_refused_over_an_earlier_run_and_told_to_resume(tmp_path: Path) -> None:
    claim(tmp_path, JOB, Existing.REFUSE)
    (tmp_path / "part-0.parquet").write_text("results")
    with pytest.raises(ConfigError, match="holds a sponge run of q4") as e:
        claim(tmp_path, JOB, Existing.REFUSE)
    assert "--resume" in e.value.hint
    assert (tmp_path / "part-0.parquet").read_text() == "results"


def test_the_same_job_resumes_and_another_is_refused_naming_what_differs(tmp_path: Path) -> None:
    claim(tmp_path, JOB, Existing.REFUSE)
    assert claim(tmp_path, dict(JOB), Existing.RESUME) is True
    with pytest.raises(ConfigError, match="seed 3 there, 4 here") as e:
        claim(tmp_path, {**JOB, "seed": 4}, Existing.RESUME)
    assert "flags it was started with" in e.value.hint


def test_resume_needs_a_run_to_resume(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no run to resume"):
        claim(tmp_path / "none", JOB, Existing.RESUME)
    assert not (tmp_path / "none").exists()


def test_replace_starts_a_callers_own_run_over(tmp_path: Path) -> None:
    claim(tmp_path, JOB, Existing.REFUSE)
    (tmp_path / "part-0.parquet").write_text("old results")
    assert claim(tmp_path, {**JOB, "seed": 9}, Existing.REPLACE) is False
    assert sorted(p.name for p in tmp_path.iterdir()) == [MARKER]
    assert json.loads((tmp_path / MARKER).read_text())["identity"]["seed"] == 9


def test_a_malformed_marker_is_reported_not_guessed(tmp_path: Path) -> None:
    (tmp_path / MARKER).write_text("{not json")
    with pytest.raises(ConfigError, match="malformed"):
        claim(tmp_path, JOB, Existing.RESUME)
    assert (tmp_path / MARKER).read_text() == "{not json"

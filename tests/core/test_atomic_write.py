"""The atomic writer leaves the old file or the whole new one, and never a temporary file behind."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import atomic_write


def test_a_new_file_replaces_the_old_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "plan.json"
    atomic_write.write_text(target, "old")
    atomic_write.write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in target.parent.iterdir()] == ["plan.json"]


def test_a_writer_that_fails_leaves_the_old_file_and_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "hwm"
    atomic_write.write_text(target, "41")

    def torn(tmp: Path) -> None:
        tmp.write_text("4")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write.write_atomically(target, torn)
    assert target.read_text() == "41"
    assert [p.name for p in tmp_path.iterdir()] == ["hwm"]


def test_the_temporary_is_hidden_from_spark_and_beside_the_target(tmp_path: Path) -> None:
    seen: list[Path] = []
    atomic_write.write_atomically(tmp_path / "part-00001.jsonl", lambda tmp: (seen.append(tmp), tmp.touch()))
    (tmp,) = seen
    assert tmp.parent == tmp_path and tmp.name.startswith(".part-00001.jsonl.")


def test_a_write_that_need_not_survive_a_power_loss_is_whole_and_flushes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    synced: list[int] = []
    monkeypatch.setattr(os, "fsync", synced.append)
    target = tmp_path / "mark"
    atomic_write.write_text(target, "41", durable=False)
    assert target.read_text() == "41" and synced == []
    assert [p.name for p in tmp_path.iterdir()] == ["mark"]
    atomic_write.write_text(target, "42")
    assert len(synced) == 2  # the file, then its directory

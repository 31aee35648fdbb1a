"""Reading a streaming file sink's output through its `_spark_metadata` log."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import InputError
from core.results import read_results
from core.sink_log import committed_files


def _part(root: Path, name: str, values: list[int]) -> Path:
    path = root / f"part-00000-{name}-c000.snappy.parquet"
    pq.write_table(pa.table({"x": values}), path)
    return path


def _log(root: Path, batch: str, paths: list[Path], action: str = "add") -> None:
    log = root / "_spark_metadata"
    log.mkdir(exist_ok=True)
    entries = [
        json.dumps({"path": p.resolve().as_uri(), "size": 1, "isDir": False, "action": action}) for p in paths
    ]
    (log / batch).write_text("\n".join(["v1", *entries]))


def test_files_of_an_uncommitted_epoch_are_not_read(tmp_path: Path) -> None:
    """A query stopped mid-epoch leaves that epoch's finished task files; the replay writes new ones."""
    first = _part(tmp_path, "a", [1, 2])
    _log(tmp_path, "0", [first])
    _part(tmp_path, "stale", [3, 4])  # epoch 1's first attempt, never committed
    replay = _part(tmp_path, "b", [3, 4])
    _log(tmp_path, "1", [replay])
    (tmp_path / "_spark_metadata" / ".1.crc").write_bytes(b"\x00")
    (tmp_path / "_spark_metadata" / ".2.tmp").write_text("v1\n")
    assert committed_files(tmp_path) == sorted([first, replay])
    assert sorted(read_results(tmp_path).column("x").to_pylist()) == [1, 2, 3, 4]


def test_a_compaction_replaces_the_epochs_before_it(tmp_path: Path) -> None:
    files = [_part(tmp_path, str(i), [i]) for i in range(4)]
    _log(tmp_path, "0", files[:1])  # superseded by the compaction, whether or not it was cleaned up
    _log(tmp_path, "9.compact", files[:3])
    _log(tmp_path, "10", files[3:])
    _log(tmp_path, "11", files[1:2], action="delete")
    assert committed_files(tmp_path) == sorted([files[0], files[2], files[3]])


def test_a_moved_output_directory_reads_by_file_name(tmp_path: Path) -> None:
    original = tmp_path / "run"
    original.mkdir()
    _log(original, "0", [_part(original, "a", [5])])
    moved = original.rename(tmp_path / "copy")
    assert read_results(moved).column("x").to_pylist() == [5]


def test_a_committed_file_that_is_missing_is_an_error(tmp_path: Path) -> None:
    part = _part(tmp_path, "a", [1])
    _log(tmp_path, "0", [part])
    part.unlink()
    with pytest.raises(InputError, match="missing"):
        committed_files(tmp_path)


def test_a_foreign_log_is_refused(tmp_path: Path) -> None:
    (tmp_path / "_spark_metadata").mkdir()
    (tmp_path / "_spark_metadata" / "0").write_text('{"path": "x"}')
    with pytest.raises(InputError, match="not a Spark file-sink log"):
        committed_files(tmp_path)

"""Workers' rows written beside Spark's sink: named per chunk, read only once their epoch committed."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from core.direct_sink import DIRECT_SINK_TAG, chunk_file, committed_chunk_files, write_chunk
from core.errors import InputError
from core.kinesis import shard_units
from core.results import read_results


def _checkpoint(out: Path, batches: dict[int, list[dict]], committed: list[int]) -> None:
    """A Spark checkpoint's offsets and commits logs, as Spark writes them."""
    for sub in ("offsets", "commits"):
        (out / "_checkpoint" / sub).mkdir(parents=True, exist_ok=True)
    for batch, offsets in batches.items():
        lines = ["v1", json.dumps({"batchWatermarkMs": 0}), *(json.dumps(o) for o in offsets)]
        (out / "_checkpoint" / "offsets" / str(batch)).write_text("\n".join(lines))
    for batch in committed:
        (out / "_checkpoint" / "commits" / str(batch)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    (out / "_checkpoint" / "commits" / f".{max(committed, default=0)}.crc").write_bytes(b"\x00")


def _chunk(out: Path, start: int, end: int, seq: int, values: list[int]) -> Path:
    path = chunk_file(out, "bid", start, end, seq)
    write_chunk(path, pa.table({"x": values}))
    return path


def test_chunk_files_of_an_uncommitted_epoch_are_not_read(tmp_path: Path) -> None:
    """A query stopped mid-epoch leaves that epoch's chunks; only committed ranges count."""
    done = [_chunk(tmp_path, 0, 100, 0, [1]), _chunk(tmp_path, 0, 100, 1, [2])]
    done.append(_chunk(tmp_path, 100, 200, 0, [3]))
    _chunk(tmp_path, 200, 300, 0, [4])  # epoch 2 ran its tasks but never committed
    local = {"event": 300}
    offsets = {b: [local, {"event": end, DIRECT_SINK_TAG: "bid"}] for b, end in ((1, 200), (2, 300))}
    _checkpoint(tmp_path, offsets, committed=[0, 1])
    assert committed_chunk_files(tmp_path) == sorted(done)
    assert sorted(read_results(tmp_path).column("x").to_pylist()) == [1, 2, 3]


def test_a_kinesis_shards_chunks_count_up_to_that_shards_committed_end(tmp_path: Path) -> None:
    """Each shard has its own units (core/kinesis.py `shard_units`) and its own committed end: a chunk
    of one shard is not counted by another shard's progress."""
    a, b = "shardId-000000000000", "shardId-000000000003"

    def chunk(shard: str, first: int, count: int, value: int) -> Path:
        units = shard_units(shard, first, count)
        return _chunk(tmp_path, units.start, units.stop, 0, [value])

    done = [chunk(a, 0, 50, 1), chunk(b, 0, 20, 2)]
    chunk(a, 50, 30, 3)  # beyond shard a's committed 50 records
    chunk(b, 20, 5, 4)  # beyond shard b's 20 records
    shards = {
        a: {"seq": "9", "time": 1, "ended": False, "n": 50},
        b: {"seq": "7", "time": 1, "ended": False, "n": 20},
    }
    offset = {"stream": "s", "source": "bid", "shards": shards, "done": False, DIRECT_SINK_TAG: "bid"}
    _checkpoint(tmp_path, {0: [offset]}, committed=[0])
    assert committed_chunk_files(tmp_path) == sorted(done)


def test_rewriting_a_chunk_replaces_it_whole(tmp_path: Path) -> None:
    """A retried task writes the same chunk again: one file, no temporaries, never doubled rows."""
    path = _chunk(tmp_path, 0, 100, 0, [1, 2])
    _chunk(tmp_path, 0, 100, 0, [1, 2])
    _checkpoint(tmp_path, {0: [{"event": 100, DIRECT_SINK_TAG: "bid"}]}, committed=[0])
    assert [p.name for p in path.parent.iterdir()] == [path.name]
    assert read_results(tmp_path).num_rows == 2


def test_without_a_committed_epoch_nothing_counts(tmp_path: Path) -> None:
    _chunk(tmp_path, 0, 100, 0, [1])
    _checkpoint(tmp_path, {0: [{"event": 100, DIRECT_SINK_TAG: "bid"}]}, committed=[])
    assert committed_chunk_files(tmp_path) == []


def test_workers_output_without_its_checkpoint_is_refused(tmp_path: Path) -> None:
    _chunk(tmp_path, 0, 100, 0, [1])
    with pytest.raises(InputError, match="no checkpoint"):
        read_results(tmp_path)

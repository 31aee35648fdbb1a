"""A malformed entry of the checkpoint's offsets log: reading the workers' rows stops with an InputError
that names the entry and says what to do, and leaves every file where it was.

Which of the workers' chunk files count is decided by the direct-sink offsets of the last committed
epoch (core/direct_sink.py), so an entry that cannot be read must never be taken as "nothing committed"
(rows lost) or as a wrong offset (rows counted that never committed).
"""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest

from core.direct_sink import DIRECT_SINK_TAG, chunk_file, committed_chunk_files, write_chunk
from core.errors import InputError
from core.results import read_results

WHOLE = ["v1", json.dumps({"batchWatermarkMs": 0}), json.dumps({"event": 100, DIRECT_SINK_TAG: "bid"})]


def _output(tmp_path: Path, offsets: str | bytes | None) -> tuple[Path, Path, dict[Path, bytes]]:
    """An output with one committed epoch (batch 0) whose offsets entry holds `offsets` (None: missing),
    and one worker's chunk file; returns (output, the entry's path, every file's bytes)."""
    chk = tmp_path / "_checkpoint"
    (chk / "commits").mkdir(parents=True)
    (chk / "offsets").mkdir()
    (chk / "commits" / "0").write_text('v1\n{"nextBatchWatermarkMs":0}')
    entry = chk / "offsets" / "0"
    if offsets is not None:
        entry.write_bytes(offsets.encode() if isinstance(offsets, str) else offsets)
    write_chunk(chunk_file(tmp_path, "bid", 0, 100, 0), pa.table({"x": [1, 2]}))
    files = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    return tmp_path, entry, files


def test_a_whole_entry_counts_the_chunk(tmp_path: Path) -> None:
    out, _, _ = _output(tmp_path, "\n".join([*WHOLE[:2], "-", json.dumps(7), WHOLE[2]]))
    assert len(committed_chunk_files(out)) == 1  # "-" and another source's non-object offset are skipped
    assert read_results(out).num_rows == 2


@pytest.mark.parametrize(
    ("offsets", "says"),
    [
        pytest.param(None, "cannot read the checkpoint's offsets entry", id="missing"),
        pytest.param("", "is not a whole Spark offsets log entry", id="empty"),
        pytest.param("v1\n", "is not a whole Spark offsets log entry", id="only the version"),
        pytest.param("\n".join(WHOLE[:2]), "is not a whole Spark offsets log entry", id="no source line"),
        pytest.param("\n".join([*WHOLE[:2], WHOLE[2][:20]]), "line 3 is not a source offset", id="torn line"),
        pytest.param("\n".join([*WHOLE[:2], "garbage"]), "line 3 is not a source offset", id="not JSON"),
        pytest.param(
            "\n".join([*WHOLE[:2], json.dumps({DIRECT_SINK_TAG: "bid"})]),
            "line 3 is not a source offset (no 'event')",
            id="no event",
        ),
        pytest.param(
            "\n".join([*WHOLE[:2], json.dumps({"event": "lots", DIRECT_SINK_TAG: "bid"})]),
            "line 3 is not a source offset",
            id="event not a number",
        ),
        pytest.param(b"v1\n\xff\xfe\n\x00", "cannot read the checkpoint's offsets entry", id="not UTF-8"),
    ],
)
def test_a_malformed_offsets_entry_names_it_and_changes_nothing(
    tmp_path: Path, offsets: str | bytes | None, says: str
) -> None:
    out, entry, files = _output(tmp_path, offsets)
    for read in (committed_chunk_files, read_results):
        with pytest.raises(InputError) as info:
            read(out)
        assert str(entry) in info.value.message and says in info.value.message
        assert "run the query again" in info.value.hint
        assert info.value.__cause__ is None and (
            info.value.__context__ is None or info.value.__suppress_context__
        )
    assert {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == files

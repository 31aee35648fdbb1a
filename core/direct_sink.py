"""Rows a worker's chain writes straight into the query's output, beside Spark's own files.

Why: when a stateless chain ends at the sink (Q1, Q2), the rows it returns need nothing more from
Spark. Sending them back through the agent, the Spark task and the JVM's Parquet writer cost the VM
~8x what computing them there did (ADR 0011), so offloading could never pay. Instead the VM agent
writes each chunk's output as one Parquet file under `<output>/_offloaded/`, and the Spark task
yields only its heartbeat (ADR 0012). A request names the file only (`chunk_name`); the agent writes
it into the one directory it was started with, so no request can make it write anywhere else.

Exactly once without Spark's sink log: a chunk's file is named by what fixes its content (entity,
the task's offset range, the chunk's sequence; a Kinesis shard's range names its shard too,
core/kinesis.py `shard_units`), and that content is deterministic, because the
routing log fixes each offset's plan at its first planning. A retried task or a re-run epoch writes
the same file again (atomically, by rename). A file counts once the epoch covering its range has
committed: the offload stream tags its offsets with `DIRECT_SINK_TAG`, and a reader keeps the
files whose range ends at or below that stream's offset in the checkpoint's last committed epoch.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.atomic_write import write_atomically
from core.errors import InputError
from core.kinesis import shard_number, shard_of_unit, shard_units

OFFLOADED_DIR = "_offloaded"  # under the output directory; the leading "_" hides it from Spark
DIRECT_SINK_TAG = "direct_sink"  # offset key of an offload stream whose rows go straight to the sink
CHECKPOINT_DIR = "_checkpoint"
_NAME = re.compile(r"^(?P<entity>[a-z_][a-z0-9_]*)-(?P<start>\d+)-(?P<end>\d+)-(?P<seq>\d+)\.parquet$")


def chunk_name(entity: str, start: int, end: int, seq: int) -> str:
    """The file name of chunk `seq` of the task over offsets [start, end) of `entity` (events of a NEXMark
    entity generated, or files of a source read: core/spark/file_source.py)."""
    return f"{entity}-{start:012d}-{end:012d}-{seq:06d}.parquet"


def is_chunk_name(name: str) -> bool:
    """Whether `name` is a chunk file's bare name (no directory part: the agent writes only there)."""
    return _NAME.match(name) is not None


def chunk_file(output: Path, entity: str, start: int, end: int, seq: int) -> Path:
    """Where the output of chunk `seq` of the task over offsets [start, end) of `entity` goes."""
    return output / OFFLOADED_DIR / chunk_name(entity, start, end, seq)


def write_chunk(path: Path, table: pa.Table) -> None:
    """Write `table` to `path` atomically: readers see the whole file or none of it."""
    write_atomically(
        path, lambda tmp: pq.write_table(table.replace_schema_metadata(None), tmp, compression="snappy")
    )


def committed_chunk_files(output: Path) -> list[Path]:
    """The chunk files under `output` whose epochs committed, sorted; none without `_offloaded`."""
    chunks = output / OFFLOADED_DIR
    if not chunks.is_dir():
        return []
    committed = committed_ends(output / CHECKPOINT_DIR)
    files = []
    for f in chunks.iterdir():
        m = _NAME.match(f.name)
        if m and int(m["end"]) <= committed.get((m["entity"], shard_of_unit(int(m["start"]))), -1):
            files.append(f)
    return sorted(files)


def committed_ends(checkpoint: Path) -> dict[tuple[str, int], int]:
    """(entity, shard) -> end offset of its direct-sink stream in the last committed epoch of
    `checkpoint`; a Kinesis stream's shards each have their own units (core/kinesis.py
    `shard_units`), the other sources one space, shard 0."""
    commits = checkpoint / "commits"
    if not commits.is_dir():
        raise InputError(
            f"{checkpoint.parent} has workers' output in {OFFLOADED_DIR}/ but no checkpoint to say "
            "which of it committed",
            hint=f"keep {CHECKPOINT_DIR}/ with the output, or run the query again",
        )
    batches = [int(f.name) for f in commits.iterdir() if f.name.isdigit()]
    if not batches:
        return {}
    return _direct_sink_ends(checkpoint / "offsets" / str(max(batches)))


def _direct_sink_ends(offsets: Path) -> dict[tuple[str, int], int]:
    """(entity, shard) -> end offset of each direct-sink stream in one entry of Spark's offsets log.

    Why strict: which chunk files count is decided by these numbers alone, so an entry that cannot be
    read must stop the reader (an InputError naming the file) rather than count too many rows or too few.
    """
    hint = (
        "the checkpoint is damaged (Spark writes this entry before it commits the epoch): run the query "
        f"again to rewrite the output; {OFFLOADED_DIR}/ cannot be counted without it"
    )
    try:
        lines = offsets.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as e:
        detail = e.strerror if isinstance(e, OSError) else str(e)
        raise InputError(
            f"cannot read the checkpoint's offsets entry {offsets}: {detail}", hint=hint
        ) from None
    if len(lines) < 3 or not lines[0].startswith("v"):
        # A whole entry has a version line, the batch's metadata and one line per source.
        raise InputError(f"{offsets} is not a whole Spark offsets log entry (truncated?)", hint=hint)
    ends: dict[tuple[str, int], int] = {}
    for number, line in enumerate(lines[2:], start=3):
        if line.strip() == "-":
            continue  # a source without an offset yet
        try:
            offset = json.loads(line)  # each source's own JSON: only ours carry the tag
            if isinstance(offset, dict) and DIRECT_SINK_TAG in offset:
                entity = str(offset[DIRECT_SINK_TAG])
                if "shards" in offset:  # the Kinesis source's: records of each shard
                    for shard, at in offset["shards"].items():
                        ends[(entity, shard_number(shard))] = shard_units(shard, int(at["n"]), 0).start
                else:
                    unit = "files" if "files" in offset else "event"  # the file source's, the generator's
                    ends[(entity, 0)] = int(offset[unit])
        except (ValueError, TypeError, KeyError) as e:
            detail = f"no {e}" if isinstance(e, KeyError) else str(e)
            raise InputError(
                f"{offsets} line {number} is not a source offset ({detail})", hint=hint
            ) from None
    return ends

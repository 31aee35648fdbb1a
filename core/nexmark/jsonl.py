"""Write generated NEXMark events as JSON lines, the input layout of the "nexmark-files" Spark source.

Why: the file source (core/spark/file_source.py) reads `DIR/<entity>/*.jsonl`; tests and users need a
quick way to produce such a directory with known contents, so that a run over the files can be checked
against the generator and the batch reference. Timestamps are written as ISO-8601 UTC strings with
microseconds ("2026-01-01T00:00:00.000100Z"), the human-readable of the two forms the source accepts.
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import polars as pl
import pyarrow as pa
import pyarrow.compute as pc

from core import atomic_write
from core.errors import ConfigError
from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.schema import ENTITIES

FILE_GLOB = "part-*.jsonl"
ISO_FORMAT = "%Y-%m-%dT%H:%M:%SZ"
"""Arrow's %S prints seconds with the column's fraction, so microseconds survive the round trip."""


def jsonl_bytes(batch: pa.RecordBatch | pa.Table) -> bytes:
    """Rows of `batch` as JSON lines (columns in schema order), timestamps as ISO-8601 UTC strings."""
    table = pa.Table.from_batches([batch]) if isinstance(batch, pa.RecordBatch) else batch
    if table.num_rows == 0:
        return b""
    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type):
            utc = table.column(i).cast(pa.timestamp("us", tz="UTC"))
            table = table.set_column(i, field.name, pc.strftime(utc, format=ISO_FORMAT))
    out = io.BytesIO()
    pl.from_arrow(table).write_ndjson(out)
    return out.getvalue()


def write_jsonl_events(
    config: GeneratorConfig, out_dir: Path | str, files_per_entity: int = 4
) -> dict[str, int]:
    """Write `out_dir/{person,auction,bid}/part-NNNNN.jsonl`; return the row count per entity.

    The events are split into `files_per_entity` consecutive ranges of the global event index, so the
    files sorted by name are in event-time order (a streaming read never sees late data) and every
    entity has the same number of files (some may be empty). Old part files are removed first, and
    each file is written under a hidden temporary name and renamed, so a source following the
    directory never reads a half-written file.
    """
    if isinstance(files_per_entity, bool) or not isinstance(files_per_entity, int) or files_per_entity < 1:
        raise ConfigError(
            f"files_per_entity must be a positive integer, got {files_per_entity!r}", hint="use e.g. 4"
        )
    out_dir = Path(out_dir)
    step = max(1, math.ceil(config.events / files_per_entity))
    counts: dict[str, int] = {}
    for entity in ENTITIES:
        entity_dir = out_dir / entity
        entity_dir.mkdir(parents=True, exist_ok=True)
        for stale in entity_dir.glob(FILE_GLOB):
            stale.unlink()
        rows = 0
        for part in range(files_per_entity):
            start = min(part * step, config.events)
            batch = generate(config, entity, start, min(start + step, config.events))
            target = entity_dir / f"part-{part:05d}.jsonl"
            atomic_write.write_bytes(target, jsonl_bytes(batch))
            rows += batch.num_rows
        counts[entity] = rows
    return counts

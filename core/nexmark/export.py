"""Write and read generated NEXMark events as Parquet (`sponge events`, docs/queries.md "Events").

The files are the input of the batch reference and of file-based runs, so they carry the event index
(`event_id`, the n the generator was keyed by) and the arrival time next to the entity columns.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from core.errors import ConfigError, InputError
from core.nexmark.generator import GeneratorConfig, event_ids, generate
from core.nexmark.schema import ENTITIES, TIMESTAMP, schema_for

PART_GLOB = "part-*.parquet"
DEFAULT_BATCH_EVENTS = 200_000


def export_schema(entity: str) -> pa.Schema:
    """The entity's columns followed by `event_id` int64 and `arrival_time` timestamp."""
    return (
        schema_for(entity)
        .append(pa.field("event_id", pa.int64()))
        .append(pa.field("arrival_time", TIMESTAMP))
    )


def with_export_columns(batch: pa.RecordBatch, entity: str, start: int, end: int) -> pa.RecordBatch:
    """Add `event_id` and `arrival_time` to a generated batch of events [start, end).

    Events arrive on schedule (docs/queries.md), so the arrival time is the event time.
    """
    ids = pa.array(event_ids(entity, start, end), type=pa.int64())
    columns = [*batch.columns, ids, batch.column("date_time")]
    return pa.RecordBatch.from_arrays(columns, schema=export_schema(entity))


def write_events(
    config: GeneratorConfig, out_dir: Path, batch_events: int = DEFAULT_BATCH_EVENTS
) -> dict[str, int]:
    """Write `out_dir/{person,auction,bid}/part-NNNNN.parquet`; return the row count per entity.

    Old part files in those directories are removed first, so a smaller re-export never leaves rows
    of a previous run behind. Each entity gets at least one (possibly empty) file so its schema is
    always readable.
    """
    if batch_events <= 0:
        raise ConfigError(f"batch_events must be positive, got {batch_events}", hint="use e.g. 200000")
    out_dir = Path(out_dir)
    counts: dict[str, int] = {}
    for entity in ENTITIES:
        entity_dir = out_dir / entity
        entity_dir.mkdir(parents=True, exist_ok=True)
        for stale in entity_dir.glob(PART_GLOB):
            stale.unlink()
        rows = 0
        part = 0
        for start in range(0, config.events, batch_events):
            end = min(start + batch_events, config.events)
            batch = generate(config, entity, start, end)
            if batch.num_rows == 0:
                continue
            pq.write_table(
                pa.Table.from_batches([with_export_columns(batch, entity, start, end)]),
                entity_dir / f"part-{part:05d}.parquet",
            )
            rows += batch.num_rows
            part += 1
        if part == 0:
            pq.write_table(export_schema(entity).empty_table(), entity_dir / "part-00000.parquet")
        counts[entity] = rows
    return counts


def read_events(out_dir: Path) -> dict[str, pa.Table]:
    """Read what `write_events` wrote: one table per entity, rows in event order."""
    out_dir = Path(out_dir)
    tables: dict[str, pa.Table] = {}
    for entity in ENTITIES:
        parts = sorted((out_dir / entity).glob(PART_GLOB))
        if not parts:
            raise InputError(
                f"no {entity} events under {out_dir / entity}",
                hint="generate them with `sponge events` (core.nexmark.export.write_events)",
            )
        schema = export_schema(entity)
        tables[entity] = pa.concat_tables(pq.read_table(part, schema=schema) for part in parts)
    return tables

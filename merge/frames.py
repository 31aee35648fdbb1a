"""Several named frames and a few numbers in one Arrow table: how a keyed step crosses the wire.

Why one table: a worker's program takes one Arrow table in and gives one back (the chunk protocol,
core/wire/), and a keyed step's input is a state (several frames) plus the batch's rows and the
watermark. Packing them as one table, the frames' rows tagged with their name and their columns and
the numbers kept in the schema's metadata, lets a seal travel as any chunk does, with its checksum,
retries and cache.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

import polars as pl
import pyarrow as pa

PART = "sponge_part"
_META = b"sponge_frames"


def pack(frames: Mapping[str, pl.DataFrame | None], numbers: Mapping[str, int | None]) -> pa.Table:
    """One table holding `frames` (None: absent, as an empty state) and `numbers`."""
    present = {name: f for name, f in frames.items() if f is not None}
    layout = {
        "parts": {name: f.columns for name, f in present.items()},
        "absent": sorted(set(frames) - set(present)),
    }
    tagged = [f.with_columns(pl.lit(name).alias(PART)) for name, f in present.items()]
    body = (
        pl.concat(tagged, how="diagonal_relaxed")
        if tagged
        else pl.DataFrame({PART: []}, schema={PART: pl.Utf8})
    )
    table = body.to_arrow()
    meta = json.dumps({**layout, "numbers": dict(numbers)}).encode()
    return table.replace_schema_metadata({_META: meta})


def unpack(table: pa.Table) -> tuple[dict[str, pl.DataFrame | None], dict[str, int | None]]:
    """The frames and numbers `pack` put in `table`."""
    meta = json.loads((table.schema.metadata or {})[_META])
    body = pl.from_arrow(table)
    assert isinstance(body, pl.DataFrame)
    frames: dict[str, pl.DataFrame | None] = {name: None for name in meta["absent"]}
    for name, columns in meta["parts"].items():
        frames[name] = body.filter(pl.col(PART) == name).select(columns)
    return frames, meta["numbers"]

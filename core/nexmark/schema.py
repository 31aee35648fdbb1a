"""Arrow schemas of the three NEXMark entities, the single source of truth for their column layout.

The generator, the Parquet export, the Spark source and the batch reference all build on these
schemas so that a column added or renamed here cannot silently diverge between them
(docs/queries.md, "Events").
"""

from __future__ import annotations

import pyarrow as pa

from core.errors import ConfigError

TIMESTAMP = pa.timestamp("us", tz="UTC")
"""All event timestamps: microseconds, zoned UTC, so Spark reads them as TIMESTAMP without shifting."""

END_OF_STREAM_TIME_US = 4_102_444_800_000_000
"""2100-01-01T00:00:00Z in microseconds since the epoch: the event time of the end-of-stream row.

The streaming source appends one row with this date_time after the last event so that Spark's
watermark (which only advances on data) passes every real window and closes it; the lowering
filters the row out again with `date_time < END_OF_STREAM_TIME`.
"""

PERSON_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("name", pa.string()),
        pa.field("email_address", pa.string()),
        pa.field("credit_card", pa.string()),
        pa.field("city", pa.string()),
        pa.field("state", pa.string()),
        pa.field("date_time", TIMESTAMP),
        pa.field("extra", pa.string()),
    ]
)

AUCTION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.int64()),
        pa.field("item_name", pa.string()),
        pa.field("description", pa.string()),
        pa.field("initial_bid", pa.int64()),
        pa.field("reserve", pa.int64()),
        pa.field("date_time", TIMESTAMP),
        pa.field("expires", TIMESTAMP),
        pa.field("seller", pa.int64()),
        pa.field("category", pa.int64()),
        pa.field("extra", pa.string()),
    ]
)

BID_SCHEMA = pa.schema(
    [
        pa.field("auction", pa.int64()),
        pa.field("bidder", pa.int64()),
        pa.field("price", pa.int64()),
        pa.field("channel", pa.string()),
        pa.field("url", pa.string()),
        pa.field("date_time", TIMESTAMP),
        pa.field("extra", pa.string()),
    ]
)

ENTITIES: tuple[str, ...] = ("person", "auction", "bid")

_SCHEMAS: dict[str, pa.Schema] = {"person": PERSON_SCHEMA, "auction": AUCTION_SCHEMA, "bid": BID_SCHEMA}

_SPARK_TYPES: dict[pa.DataType, str] = {pa.int64(): "BIGINT", pa.string(): "STRING", TIMESTAMP: "TIMESTAMP"}


def check_entity(entity: str) -> str:
    """Return `entity` if it names a NEXMark entity; fail early with the valid names otherwise."""
    if entity not in _SCHEMAS:
        raise ConfigError(
            f"unknown NEXMark entity {entity!r}",
            hint=f"use one of {', '.join(ENTITIES)}",
        )
    return entity


def schema_for(entity: str) -> pa.Schema:
    """The Arrow schema of `entity` ("person", "auction" or "bid")."""
    return _SCHEMAS[check_entity(entity)]


def spark_ddl(entity: str) -> str:
    """The Spark DDL schema string of `entity`, derived from its Arrow schema so the two cannot drift.

    Spark's TIMESTAMP is zoned to the session time zone and stored as UTC microseconds, which is
    exactly what `timestamp[us, tz=UTC]` holds, so Arrow batches pass through without conversion.
    """
    return ", ".join(f"{field.name} {_SPARK_TYPES[field.type]}" for field in schema_for(entity))

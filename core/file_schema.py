"""What the records of one file source look like: their columns and types, the event-time column, and
which values a line may hold. One value serves a NEXMark entity and a user's own source alike.

Why one type for both: the file source, the line validator and the end-of-stream punctuation need
the same three facts, whether the source is a NEXMark entity or a source of a user's job
(core/job.py). Two rule sets are kept. NEXMark's is strict, because the queries join and window on
ids and prices: integers are non-negative and never null, and only strings may be null. A user's
source allows a null in every column except its event time, which the watermark follows. Either way,
an event time at or after the end-of-stream punctuation is refused, because it would close every
window at once.

A source's files are in one format, JSON lines (the default, and NEXMark's) or Parquet: the format
decides the files' suffix, which files the source lists, how their records are counted and how one
is read (core/spark/input_validation.py `read_file`). The rules above hold for both formats.

A schema travels to Spark's Python workers as a data source option (`to_option`), as JSON.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import pyarrow as pa

from core.errors import ConfigError
from core.nexmark.schema import END_OF_STREAM_TIME_US, check_entity, schema_for

KINDS = {
    "int64": (pa.int64(), "BIGINT"),
    "float64": (pa.float64(), "DOUBLE"),
    "string": (pa.string(), "STRING"),
    "bool": (pa.bool_(), "BOOLEAN"),
    "timestamp": (pa.timestamp("us", tz="UTC"), "TIMESTAMP"),
}
NEXMARK_EVENT_TIME = "date_time"
FORMATS = {"jsonl": ".jsonl", "parquet": ".parquet"}
"""A source's file formats, each with the suffix its complete files have."""


@dataclass(frozen=True)
class FileSchema:
    name: str  # the source: its directory under the input path, and its dead letters' directory
    columns: tuple[tuple[str, str], ...]  # (column, kind), kinds from KINDS
    event_time: str
    strict: bool = False  # NEXMark's rules: integers non-negative and never null, only strings nullable
    format: str = "jsonl"  # of its files: a FORMATS name

    def __post_init__(self) -> None:
        if self.format not in FORMATS:
            raise ConfigError(
                f"source {self.name!r}: unknown file format {self.format!r}",
                hint=f"known: {', '.join(FORMATS)}",
            )
        unknown = [k for _, k in self.columns if k not in KINDS]
        if unknown:
            raise ConfigError(
                f"source {self.name!r}: unknown column types {unknown}", hint=f"known: {list(KINDS)}"
            )
        if dict(self.columns).get(self.event_time) != "timestamp":
            raise ConfigError(
                f"source {self.name!r}: event time {self.event_time!r} is not a timestamp column"
            )

    @classmethod
    def nexmark(cls, entity: str) -> FileSchema:
        fields = schema_for(check_entity(entity))
        kinds = {t: k for k, (t, _) in KINDS.items()}
        columns = tuple((f.name, kinds[f.type]) for f in fields)
        return cls(entity, columns, NEXMARK_EVENT_TIME, strict=True)

    @property
    def suffix(self) -> str:
        """The suffix of the source's complete files: `.jsonl` or `.parquet`."""
        return FORMATS[self.format]

    def nullable(self, column: str, kind: str) -> bool:
        if column == self.event_time:
            return False
        return kind == "string" if self.strict else True

    def non_negative(self, kind: str) -> bool:
        return self.strict and kind == "int64"

    @property
    def arrow(self) -> pa.Schema:
        return pa.schema([(c, KINDS[k][0]) for c, k in self.columns])

    @property
    def spark_ddl(self) -> str:
        return ", ".join(f"`{c}` {KINDS[k][1]}" for c, k in self.columns)

    def end_of_stream(self) -> pa.RecordBatch:
        """The punctuation row: the event time at END_OF_STREAM_TIME_US, every other column null."""
        schema = self.arrow
        return pa.RecordBatch.from_arrays(
            [
                pa.array([END_OF_STREAM_TIME_US], f.type)
                if f.name == self.event_time
                else pa.nulls(1, f.type)
                for f in schema
            ],
            schema=schema,
        )

    def to_option(self) -> str:
        return json.dumps(
            {
                "name": self.name,
                "columns": self.columns,
                "event_time": self.event_time,
                "strict": self.strict,
                "format": self.format,
            }
        )

    @classmethod
    def from_option(cls, text: str) -> FileSchema:
        try:
            data = json.loads(text)
            return cls(
                str(data["name"]),
                tuple((str(c), str(k)) for c, k in data["columns"]),
                str(data["event_time"]),
                bool(data.get("strict", False)),
                str(data.get("format", "jsonl")),
            )
        except (ValueError, KeyError, TypeError) as e:
            raise ConfigError(f"the file source's schema option is malformed: {e}") from None

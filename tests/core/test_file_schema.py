"""A source's schema: its format travels with it to Spark's workers, and an unknown one is refused."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.file_schema import FileSchema

COLUMNS = (("user", "int64"), ("at", "timestamp"))


@pytest.mark.parametrize("format", ["jsonl", "parquet"])
def test_the_format_survives_the_data_source_option(format: str) -> None:
    schema = FileSchema("view", COLUMNS, "at", format=format)
    assert FileSchema.from_option(schema.to_option()) == schema
    assert schema.suffix == f".{format}"


def test_an_option_without_a_format_is_json_lines_and_nexmark_stays_so() -> None:
    assert FileSchema.from_option(
        '{"name": "v", "columns": [["at", "timestamp"]], "event_time": "at"}'
    ).format == ("jsonl")
    assert FileSchema.nexmark("bid").format == "jsonl" and FileSchema.nexmark("bid").suffix == ".jsonl"


def test_an_unknown_format_is_refused_naming_the_known_ones() -> None:
    with pytest.raises(ConfigError, match="'csv'") as raised:
        FileSchema("view", COLUMNS, "at", format="csv")
    assert raised.value.hint == "known: jsonl, parquet"

"""The router's key groups are Spark's: pmod(xxhash64(keys), 128) computed by Spark on the same rows."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.offload_plan import KEY_GROUPS, key_groups_of, key_hash

pytestmark = pytest.mark.spark

EDGES = [0, 1, -1, 42, 2**31 - 1, -(2**31), 2**62, 2**63 - 1, -(2**63), None]
TEXTS = ["", "a", "abc", "person-1000", "x" * 31, "y" * 32, "z" * 33, "ünïcødé ✓", "é" * 40, None]
TIMES = [0, 1, -1, 1_767_225_600_123_456, None]


def _spark(spark, table: pa.Table) -> tuple[list[int], list[int]]:  # type: ignore[no-untyped-def]
    """Spark's xxhash64 and key group of each row of `table`, its columns in order."""
    from pyspark.sql import functions as F

    df = spark.createDataFrame(table.to_pylist(), schema=_schema(table)).coalesce(1)
    cols = [F.col(c) for c in table.column_names]
    out = df.select(F.xxhash64(*cols).alias("h"), F.pmod(F.xxhash64(*cols), F.lit(KEY_GROUPS)).alias("g"))
    rows = out.collect()
    return [r["h"] for r in rows], [r["g"] for r in rows]


def _schema(table: pa.Table) -> str:
    names = {
        pa.int64(): "long",
        pa.int32(): "int",
        pa.string(): "string",
        pa.timestamp("us", tz="UTC"): "timestamp",
    }
    return ", ".join(f"{f.name} {names[f.type]}" for f in table.schema)


def _ours(table: pa.Table) -> tuple[list[int], list[int]]:
    signed = key_hash(table).view(np.int64).tolist()
    return signed, key_groups_of(table).tolist()


@pytest.mark.parametrize(
    "table",
    [
        pa.table({"k": pa.array(EDGES, pa.int64())}),
        pa.table({"k": pa.array([*EDGES[:4], 2**31 - 1, None], pa.int32())}),
        pa.table({"k": pa.array(TEXTS, pa.string())}),
        pa.table({"k": pa.array(TIMES, pa.int64()).cast(pa.timestamp("us", tz="UTC"))}),
        pa.table({"a": pa.array(EDGES, pa.int64()), "b": pa.array(TEXTS, pa.string())}),
    ],
    ids=["long", "int", "string", "timestamp", "long+string"],
)
def test_edge_values_hash_and_group_as_spark_does(spark, table: pa.Table) -> None:  # type: ignore[no-untyped-def]
    assert _ours(table) == _spark(spark, table)


@settings(max_examples=5, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-(2**63), 2**63 - 1), st.one_of(st.none(), st.text(max_size=70))),
        min_size=1,
        max_size=200,
    )
)
def test_random_keys_hash_and_group_as_spark_does(spark, rows: list[tuple[int, str | None]]) -> None:  # type: ignore[no-untyped-def]
    table = pa.table(
        {"a": pa.array([r[0] for r in rows], pa.int64()), "b": pa.array([r[1] for r in rows], pa.string())}
    )
    assert _ours(table) == _spark(spark, table)

"""Tests of the order-insensitive result comparison every other test and the CLI rely on.

A comparator that is too lenient would let wrong query results pass everywhere, so the failure side
(missing, extra, duplicated rows, type mismatches) is tested as carefully as the tolerance side.
"""

from __future__ import annotations

import datetime as dt
import math
import random

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import results
from core.errors import InputError
from core.results import assert_same_results, diff_results, read_results

TS = pa.timestamp("us", tz="UTC")


@pytest.fixture(autouse=True, params=["python-matcher", "duckdb-prefilter"])
def matcher_path(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run every test through both comparison paths: small tables skip DuckDB's EXCEPT ALL prefilter,
    so forcing it on (threshold 0) checks that the prefilter plus matcher agree on the same cases."""
    if request.param == "duckdb-prefilter":
        monkeypatch.setattr(results, "_SMALL_ROWS", 0)
    return request.param


# For a test that stops before either comparison path (schema checks, reading files): one run, not
# the same run twice.
NO_MATCHING = pytest.mark.parametrize("matcher_path", ["python-matcher"], indirect=True)

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def table(rows: list[tuple], schema: pa.Schema | None = None) -> pa.Table:
    schema = schema or pa.schema([("k", pa.int64()), ("s", pa.string()), ("x", pa.float64())])
    return pa.Table.from_pylist([dict(zip(schema.names, r, strict=True)) for r in rows], schema=schema)


BASE = [(1, "a", 1.5), (2, "b", 2.5), (3, None, 0.1), (None, "d", None), (5, "e", 1e300)]


def test_equal_tables_in_any_order_and_chunking() -> None:
    shuffled = list(reversed(BASE))
    chunked = pa.concat_tables([table(shuffled[:2]), table(shuffled[2:])])
    assert diff_results(chunked, table(BASE)) is None
    assert diff_results(table([]), table([])) is None


def test_missing_row_is_reported_with_counts_and_example() -> None:
    text = diff_results(table(BASE[1:]), table(BASE))
    assert text is not None
    assert "actual 4, expected 5" in text
    assert "1 row(s) missing" in text and "k=1" in text and "'a'" in text
    assert "extra" not in text


def test_extra_row_is_reported() -> None:
    text = diff_results(table([*BASE, (9, "z", 9.0)]), table(BASE))
    assert text is not None
    assert "actual 6, expected 5" in text
    assert "1 row(s) extra" in text and "k=9" in text
    assert "missing" not in text


def test_duplicate_row_counts_as_extra() -> None:
    text = diff_results(table([*BASE, BASE[0]]), table(BASE))
    assert text is not None and "1 row(s) extra" in text and "k=1" in text
    # ...and equal multiplicities on both sides are fine.
    assert diff_results(table([*BASE, BASE[0]]), table([BASE[0], *BASE])) is None


def test_duplicate_with_float_noise_still_counts_multiplicity() -> None:
    expected = table([(1, "a", 1.0), (1, "a", 1.0)])
    assert diff_results(table([(1, "a", 1.0 + 1e-12)]), expected) is not None
    assert diff_results(table([(1, "a", 1.0 + 1e-12), (1, "a", 1.0 - 1e-12)]), expected) is None


def test_same_count_but_different_rows() -> None:
    changed = [*BASE[:-1], (5, "E", 1e300)]
    text = diff_results(table(changed), table(BASE))
    assert text is not None
    assert "row count equal (5)" in text
    assert "1 row(s) missing" in text and "1 row(s) extra" in text and "'E'" in text


def test_examples_are_capped_at_five() -> None:
    expected = table([(i, "x", float(i)) for i in range(12)])
    text = diff_results(table([]), expected)
    assert text is not None
    assert "12 row(s) missing" in text
    assert text.count("(k=") == 5
    assert "... and 7 more" in text


@NO_MATCHING
def test_type_mismatch_is_a_schema_mismatch() -> None:
    narrow = pa.schema([("k", pa.int32()), ("s", pa.string()), ("x", pa.float64())])
    text = diff_results(table(BASE, narrow), table(BASE))
    assert text is not None and "schema mismatch" in text and "column k: actual int32, expected int64" in text


def test_timestamp_zone_and_unit_must_match_exactly() -> None:
    def ts_table(t: pa.DataType) -> pa.Table:
        return pa.table({"t": pa.array([T0], TS).cast(t)})

    assert diff_results(ts_table(TS), ts_table(TS)) is None
    for other in (pa.timestamp("us", tz="Etc/UTC"), pa.timestamp("us"), pa.timestamp("ns", tz="UTC")):
        text = diff_results(ts_table(other), ts_table(TS))
        assert text is not None and "schema mismatch" in text, other


@NO_MATCHING
def test_names_and_order_must_match() -> None:
    renamed = table(BASE).rename_columns(["k", "s", "y"])
    text = diff_results(renamed, table(BASE))
    assert text is not None and "only in actual: y" in text and "only in expected: x" in text
    reordered = table(BASE).select(["s", "k", "x"])
    text = diff_results(reordered, table(BASE))
    assert text is not None and "different order" in text


def test_nullability_and_metadata_are_ignored() -> None:
    strict = pa.schema(
        [pa.field("k", pa.int64(), nullable=False), ("s", pa.string()), ("x", pa.float64())],
        metadata={"org.apache.spark.sql.parquet.row.metadata": "{}"},
    )
    rows = [r for r in BASE if r[0] is not None]
    assert diff_results(table(rows, strict), table(rows)) is None


def test_float_noise_within_relative_tolerance_is_equal() -> None:
    noisy = [(k, s, None if x is None else x * (1 + 1e-12)) for k, s, x in BASE]
    assert diff_results(table(noisy), table(BASE)) is None
    far = [(k, s, None if x is None else x * (1 + 1e-6)) for k, s, x in BASE]
    text = diff_results(table(far), table(BASE))
    assert text is not None and "row count equal" in text
    assert diff_results(table(far), table(BASE), rel_tol=1e-5) is None


def test_null_and_nan_floats_only_match_themselves() -> None:
    expected = table([(1, "a", math.nan), (2, "b", None)])
    assert diff_results(table([(2, "b", None), (1, "a", math.nan)]), expected) is None
    assert diff_results(table([(1, "a", None), (2, "b", math.nan)]), expected) is not None
    assert diff_results(table([(1, "a", 0.0), (2, "b", None)]), expected) is not None


def test_interleaved_float_columns_within_tolerance_still_match() -> None:
    # Sorting by the noisy first float pairs rows wrongly; the matcher must still find the pairing.
    schema = pa.schema([("k", pa.int64()), ("x", pa.float64()), ("y", pa.float64())])
    actual = table([(1, 1.0, 5.0), (1, 1.0 + 1e-13, 3.0)], schema)
    expected = table([(1, 1.0 + 1e-13, 5.0), (1, 1.0, 3.0)], schema)
    assert diff_results(actual, expected) is None


def test_only_float_columns_use_the_tolerance() -> None:
    schema = pa.schema([("k", pa.int64()), ("t", TS)])
    a = table([(10**15, T0)], schema)
    b = table([(10**15 + 1, T0)], schema)
    c = table([(10**15, T0 + dt.timedelta(microseconds=1))], schema)
    assert diff_results(a, b) is not None
    assert diff_results(a, c) is not None


def test_works_without_the_duckdb_fast_path(monkeypatch: pytest.MonkeyPatch) -> None:
    import duckdb

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("no duckdb today")

    monkeypatch.setattr(duckdb, "connect", broken)
    assert diff_results(table(list(reversed(BASE))), table(BASE)) is None
    text = diff_results(table([*BASE, BASE[1]]), table(BASE))
    assert text is not None and "1 row(s) extra" in text


def test_large_shuffled_tables_compare_equal() -> None:
    n = 200_000
    rng = random.Random(7)
    order = list(range(n))
    rng.shuffle(order)
    expected = pa.table({"k": pa.array(range(n), pa.int64()), "x": pa.array([i / 7 for i in range(n)])})
    actual = expected.take(pa.array(order))
    assert diff_results(actual, expected) is None
    assert diff_results(actual.slice(1), expected) is not None


def test_assert_same_results_raises_with_the_diff() -> None:
    assert_same_results(table(BASE), table(list(reversed(BASE))))
    with pytest.raises(AssertionError, match="row count: actual 4, expected 5"):
        assert_same_results(table(BASE[:4]), table(BASE))


# --- read_results -------------------------------------------------------------------------------


def test_read_results_reads_parts_and_skips_spark_bookkeeping(tmp_path) -> None:
    pq.write_table(table(BASE[:2]), tmp_path / "part-00000-abc.c000.snappy.parquet")
    (tmp_path / "sub").mkdir()
    pq.write_table(table(BASE[2:]), tmp_path / "sub" / "part-00001.parquet")
    pq.write_table(table(BASE[2:]), tmp_path / "sub" / "part-00001.parquet.tmp")  # not a data file
    (tmp_path / "_temporary").mkdir()
    pq.write_table(table([(7, "x", 1.0)]), tmp_path / "_temporary" / "0.parquet")
    (tmp_path / "_SUCCESS").write_text("")
    (tmp_path / ".part-00000-abc.c000.snappy.parquet.crc").write_bytes(b"\x00\x01")
    (tmp_path / "summary.json").write_text("{}")
    result = read_results(tmp_path)
    assert result.num_rows == len(BASE)
    assert diff_results(result, table(BASE)) is None


@NO_MATCHING
def test_read_results_empty_directory(tmp_path) -> None:
    schema = table([]).schema
    assert read_results(tmp_path, schema).schema == schema
    assert read_results(tmp_path, schema).num_rows == 0
    assert read_results(tmp_path).num_columns == 0


def test_read_results_single_file_and_missing_path(tmp_path) -> None:
    pq.write_table(table(BASE), tmp_path / "one.parquet")
    assert diff_results(read_results(tmp_path / "one.parquet"), table(BASE)) is None
    with pytest.raises(InputError):
        read_results(tmp_path / "nope")


@NO_MATCHING
def test_read_results_rejects_incompatible_parts(tmp_path) -> None:
    pq.write_table(table(BASE), tmp_path / "a.parquet")
    pq.write_table(pa.table({"other": [1]}), tmp_path / "b.parquet")
    with pytest.raises(InputError):
        read_results(tmp_path)


# --- properties ---------------------------------------------------------------------------------

_rows = st.lists(
    st.tuples(
        st.one_of(st.none(), st.integers(-5, 5)),
        st.one_of(st.none(), st.sampled_from(["a", "b", ""])),
        st.one_of(st.none(), st.floats(-1e6, 1e6, allow_nan=False)),
    ),
    max_size=30,
)


def _check_shuffle_noise_drop(rows: list[tuple], seed: int) -> None:
    rng = random.Random(seed)
    noisy = [(k, s, None if x is None else x * (1 + rng.uniform(-1e-12, 1e-12))) for k, s, x in rows]
    rng.shuffle(noisy)
    assert diff_results(table(noisy), table(rows)) is None
    if rows:
        dropped = noisy[:-1]
        assert diff_results(table(dropped), table(rows)) is not None
        assert diff_results(table([*noisy, noisy[0]]), table(rows)) is not None


# Each property runs on one comparison path: naming the path on the test overrides the autouse
# fixture's two, so neither test has an instance whose body does nothing. DuckDB costs ~30 ms per
# diff, so its path gets fewer examples. The fixture only patches a module constant, so sharing it
# across examples is intended.
_SHARED_FIXTURE = [HealthCheck.function_scoped_fixture]


@pytest.mark.parametrize("matcher_path", ["python-matcher"], indirect=True)
@settings(max_examples=200, deadline=None, suppress_health_check=_SHARED_FIXTURE)
@given(rows=_rows, seed=st.integers(0, 2**32 - 1))
def test_property_shuffle_and_noise_are_equal_dropping_a_row_is_not(
    rows: list[tuple], seed: int, matcher_path: str
) -> None:
    assert results._SMALL_ROWS > 0  # small tables skip DuckDB: the Python matcher does it all
    _check_shuffle_noise_drop(rows, seed)


@pytest.mark.parametrize("matcher_path", ["duckdb-prefilter"], indirect=True)
@settings(max_examples=20, deadline=None, suppress_health_check=_SHARED_FIXTURE)
@given(rows=_rows, seed=st.integers(0, 2**32 - 1))
def test_property_same_through_the_duckdb_prefilter(rows: list[tuple], seed: int, matcher_path: str) -> None:
    assert results._SMALL_ROWS == 0
    _check_shuffle_noise_drop(rows, seed)


@pytest.mark.parametrize("matcher_path", ["duckdb-prefilter"], indirect=True)
def test_the_duckdb_prefilter_cancels_identical_rows() -> None:
    """The prefilter falls back to every row on any error, which a diff alone cannot tell from
    success: check that it really leaves only the rows without an exact partner."""
    actual = table([*reversed(BASE), (9, "z", 9.0), BASE[0]])
    extra, missing = results._exact_leftovers(actual, table(BASE))
    assert sorted(extra, key=repr) == sorted([(9, "z", 9.0), BASE[0]], key=repr)
    assert missing == []

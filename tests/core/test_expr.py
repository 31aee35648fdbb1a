"""The expression tree's type rules, and the polars lowering held to the semantics core/expr.py states.

Each test below pins a row on which polars' own operators differ from Spark's (try_ mode), so a
worker would have computed something the VM does not. The Spark side and the two backends against
each other, on random trees and tables, are in tests/core/spark/test_expr_parity.py.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

import polars as pl
import pytest

from core.errors import PlanError
from core.expr import BinOp, Cast, Col, DType, Expr, Lit, Not, col, epoch_micros, lit
from core.expr_polars import to_polars

SCHEMA = {"a": DType.INT64, "b": DType.INT64, "f": DType.FLOAT64, "s": DType.STRING, "t": DType.BOOL}
I64_MAX, I64_MIN = 2**63 - 1, -(2**63)


def polars_values(e: Expr, **columns: list[Any]) -> list[Any]:
    """`e` on the given columns (one row per position) through the workers' lowering."""
    return pl.DataFrame(columns).with_columns(to_polars(e).alias("_out"))["_out"].to_list()


def test_type_errors_name_the_problem() -> None:
    with pytest.raises(PlanError, match="unknown column 'nope'"):
        col("nope").dtype(SCHEMA)
    with pytest.raises(PlanError, match="needs numbers"):
        (col("s") + 1).dtype(SCHEMA)
    assert (col("a") / col("b")).dtype(SCHEMA) == DType.FLOAT64
    assert (col("a") % 3).dtype(SCHEMA) == DType.INT64


def test_isin_values_must_be_comparable_with_the_operand() -> None:
    """Spark would cast a string to a number (raising in ANSI mode) and polars refuses: a plan error."""
    with pytest.raises(PlanError, match="isin on a string operand cannot hold 1"):
        col("s").isin("x", 1).dtype(SCHEMA)
    assert col("a").isin(1, 2.5, None).dtype(SCHEMA) == DType.BOOL
    assert col("s").isin("x", None).dtype(SCHEMA) == DType.BOOL


def test_remainder_takes_the_dividends_sign() -> None:
    df = pl.DataFrame({"a": [-7, 7, -7, 7], "b": [3, 3, -3, -3]})
    assert df.select(to_polars(Col("a") % Col("b"))).to_series().to_list() == [-1, 1, -1, 1]


def test_not_equal_with_a_null_is_null() -> None:
    assert polars_values(col("a").ne(col("b")), a=[1, None, 1], b=[None, 1, 2]) == [None, None, True]


def test_int64_overflow_is_null_not_wrapped() -> None:
    a, b = [I64_MAX, I64_MIN, I64_MIN, 3037000500, 5], [1, 1, -1, 3037000500, 6]
    assert polars_values(col("a") + col("b"), a=a, b=b) == [None, I64_MIN + 1, None, 6074001000, 11]
    assert polars_values(col("a") - col("b"), a=a, b=b) == [I64_MAX - 1, None, I64_MIN + 1, 0, -1]
    assert polars_values(col("a") * col("b"), a=a, b=b) == [I64_MAX, I64_MIN, None, None, 30]


def test_division_by_zero_is_null() -> None:
    got = polars_values(col("f") / col("g"), f=[1.0, -1.0, math.nan, 0.0, 1.0], g=[0.0, -0.0, 0.0, 0.0, 4.0])
    assert got == [None, None, None, None, 0.25]
    assert polars_values(col("a") / col("b"), a=[1, 3], b=[0, 2]) == [None, 1.5]


def test_division_by_a_constant_is_correctly_rounded() -> None:
    """polars multiplies by the constant's reciprocal; Spark (and IEEE) divide."""
    assert polars_values(col("f") / lit(1e17), f=[1e308, 1.0]) == [1e308 / 1e17, 1.0 / 1e17]
    assert polars_values(col("a") / lit(-65537), a=[-35, 1]) == [-35 / -65537, 1 / -65537]


def test_remainder_is_exact_and_null_for_a_zero_divisor() -> None:
    """C's fmod, as Java's and Spark's %: exact for floats, int64's minimum included."""
    a, b = [I64_MIN, 5, I64_MIN, 5, None], [5, I64_MIN, -1, 0, 3]
    assert polars_values(col("a") % col("b"), a=a, b=b) == [-3, 5, 0, None, None]
    f = [5.3, 1e17, -5.0, 5.5, math.inf]
    g = [0.7, 3.3, math.inf, -0.0, 2.0]
    got = polars_values(col("f") % col("g"), f=f, g=g)
    assert got[:4] == [math.fmod(5.3, 0.7), math.fmod(1e17, 3.3), -5.0, None]
    assert math.isnan(got[4])
    assert math.copysign(1.0, polars_values(col("f") % lit(3.0), f=[-0.0])[0]) == -1.0


def test_float_to_int64_cast_truncates_and_nulls_what_has_no_int64() -> None:
    f = [-9.9, 9.9, math.nan, math.inf, 1e30, 2.0**63, -(2.0**63), None]
    assert polars_values(col("f").cast(DType.INT64), f=f) == [-9, 9, None, None, None, I64_MAX, I64_MIN, None]
    assert polars_values(col("a").cast(DType.INT64), a=[I64_MAX - 1]) == [I64_MAX - 1]  # ints untouched


def test_isin_is_sqls_three_valued_or_of_equalities() -> None:
    a = [1, 2, None]
    assert polars_values(col("a").isin(1, None), a=a) == [True, None, None]
    assert polars_values(col("a").isin(), a=a) == [False, False, False]
    assert polars_values(col("a").isin(1.5, 2), a=a) == [False, True, None]
    # A float in the list makes the comparison float64, as in Spark: 2**53 + 1 rounds to 2**53.
    assert polars_values(col("a").isin(2**53, 0.5), a=[2**53 + 1]) == [True]
    assert polars_values(col("f").isin(math.nan, 0.0), f=[math.nan, -0.0, 1.0]) == [True, True, False]


def test_timestamp_literals_and_casts() -> None:
    """A naive datetime literal is UTC; a timestamp casts to itself."""
    at = datetime(2026, 3, 29, 1, 0, 0, 1, tzinfo=UTC)
    assert epoch_micros(at.replace(tzinfo=None)) == epoch_micros(at) == int(at.timestamp()) * 10**6 + 1
    assert epoch_micros(datetime(1969, 12, 31, 23, 59, 59, 999999)) == -1
    naive = Lit(at.replace(tzinfo=None), DType.TIMESTAMP)
    assert lit(at).type_ == DType.TIMESTAMP
    got = polars_values(col("ts").eq(naive) & Cast(col("ts"), DType.TIMESTAMP).eq(lit(at)), ts=[at, None])
    assert got == [True, None]
    with pytest.raises(PlanError, match="must be a datetime"):
        to_polars(Lit("2026-01-01", DType.TIMESTAMP))


def test_a_comparison_with_a_null_literal_keeps_one_value_per_row() -> None:
    """polars folds `a < null` to a literal; compared with another folded literal it gave one row."""
    e = BinOp("==", Not(Lit(None, DType.BOOL)), BinOp("<", col("a"), Lit(None, DType.INT64)))
    assert polars_values(e, a=[1, 2, 3]) == [None, None, None]
    assert polars_values(BinOp("!=", lit(True) & lit(False), col("a").isin(None)), a=[1, 2]) == [None, None]

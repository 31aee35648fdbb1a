"""One expression tree, two backends: Spark Columns and polars must compute the same values."""

from __future__ import annotations

import math
import random

import polars as pl
import pytest

from core.errors import PlanError
from core.expr import BinOp, Col, DType, Expr, IsIn, col, lit
from core.expr_polars import to_polars

SCHEMA = {"a": DType.INT64, "b": DType.INT64, "f": DType.FLOAT64, "s": DType.STRING, "t": DType.BOOL}


def random_expr(rng: random.Random, want: DType, depth: int = 0) -> Expr:
    """A random well-typed expression; divisors are never zero (Spark's ANSI mode raises on that)."""
    leaf = depth >= 3 or rng.random() < 0.3
    if want == DType.BOOL:
        if leaf:
            return col("t")
        kind = rng.choice(["cmp", "and", "or", "not", "isin", "strcmp"])
        if kind == "cmp":
            op = rng.choice(["==", "!=", "<", "<=", ">", ">="])
            t = rng.choice([DType.INT64, DType.FLOAT64])
            return BinOp(op, random_expr(rng, t, depth + 1), random_expr(rng, t, depth + 1))
        if kind in ("and", "or"):
            a, b = random_expr(rng, DType.BOOL, depth + 1), random_expr(rng, DType.BOOL, depth + 1)
            return (a & b) if kind == "and" else (a | b)
        if kind == "not":
            return ~random_expr(rng, DType.BOOL, depth + 1)
        if kind == "isin":
            return IsIn(random_expr(rng, DType.INT64, depth + 1), tuple(rng.sample(range(-5, 6), 3)))
        return col("s").eq(rng.choice(["x", "yy", ""]))
    if leaf:
        if want == DType.INT64:
            return rng.choice([col("a"), col("b"), lit(rng.randint(-7, 7))])
        return rng.choice([col("f"), lit(rng.uniform(-3, 3))])
    if want == DType.INT64:
        op = rng.choice(["+", "-", "*", "%"])
        right = col("b") if op == "%" else random_expr(rng, DType.INT64, depth + 1)
        return BinOp(op, random_expr(rng, DType.INT64, depth + 1), right)
    op = rng.choice(["+", "-", "*", "/", "cast"])
    if op == "cast":
        return random_expr(rng, DType.INT64, depth + 1).cast(DType.FLOAT64)
    if op == "/":
        return BinOp("/", random_expr(rng, rng.choice([DType.INT64, DType.FLOAT64]), depth + 1), col("b"))
    return BinOp(op, random_expr(rng, DType.FLOAT64, depth + 1), random_expr(rng, DType.FLOAT64, depth + 1))


def _rows(n: int = 64) -> dict[str, list]:
    rng = random.Random(7)
    return {
        "a": [rng.randint(-50, 50) for _ in range(n)],
        "b": [rng.choice([-7, -3, -1, 1, 2, 5, 9]) for _ in range(n)],
        "f": [rng.uniform(-100, 100) for _ in range(n)],
        "s": [rng.choice(["x", "yy", "", "zzz"]) for _ in range(n)],
        "t": [rng.random() < 0.5 for _ in range(n)],
    }


def _same(x: object, y: object) -> bool:
    if isinstance(x, float) or isinstance(y, float):
        return math.isclose(float(x), float(y), rel_tol=1e-9, abs_tol=1e-12)  # type: ignore[arg-type]
    return x == y


def test_type_errors_name_the_problem() -> None:
    with pytest.raises(PlanError, match="unknown column 'nope'"):
        col("nope").dtype(SCHEMA)
    with pytest.raises(PlanError, match="needs numbers"):
        (col("s") + 1).dtype(SCHEMA)
    assert (col("a") / col("b")).dtype(SCHEMA) == DType.FLOAT64
    assert (col("a") % 3).dtype(SCHEMA) == DType.INT64


def test_remainder_takes_the_dividends_sign() -> None:
    df = pl.DataFrame({"a": [-7, 7, -7, 7], "b": [3, 3, -3, -3]})
    assert df.select(to_polars(Col("a") % Col("b"))).to_series().to_list() == [-1, 1, -1, 1]


@pytest.mark.spark
def test_spark_and_polars_agree_on_random_expressions(spark) -> None:
    from core.spark.expr_spark import to_spark

    rng = random.Random(2026)
    exprs = [random_expr(rng, rng.choice([DType.INT64, DType.FLOAT64, DType.BOOL])) for _ in range(300)]
    for e in exprs:
        e.dtype(SCHEMA)  # every generated expression type-checks
    data = _rows()
    by_polars = pl.DataFrame(data).select([to_polars(e).alias(f"e{i}") for i, e in enumerate(exprs)])
    sdf = spark.createDataFrame(
        list(zip(*data.values(), strict=True)), "a long, b long, f double, s string, t boolean"
    )
    by_spark = sdf.select([to_spark(e).alias(f"e{i}") for i, e in enumerate(exprs)]).collect()
    mismatches = []
    for i, e in enumerate(exprs):
        ours = by_polars[f"e{i}"].to_list()
        theirs = [row[f"e{i}"] for row in by_spark]
        if not all(_same(x, y) for x, y in zip(ours, theirs, strict=True)):
            mismatches.append(repr(e))
    assert not mismatches, f"{len(mismatches)} expressions disagree, e.g. {mismatches[:2]}"

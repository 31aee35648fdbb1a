"""Lower an `Expr` to a polars expression: the vectorised backend Lambda workers evaluate."""

from __future__ import annotations

import polars as pl

from core.errors import PlanError
from core.expr import PYTHON_OPERATORS, BinOp, BoolOp, Cast, Col, DType, Expr, IsIn, Lit, Not

_POLARS_TYPES = {
    DType.INT64: pl.Int64,
    DType.FLOAT64: pl.Float64,
    DType.STRING: pl.Utf8,
    DType.BOOL: pl.Boolean,
}


def to_polars(e: Expr) -> pl.Expr:
    if isinstance(e, Col):
        return pl.col(e.name)
    if isinstance(e, Lit):
        return pl.lit(e.value, dtype=_POLARS_TYPES.get(e.type_))
    if isinstance(e, BinOp):
        a, b = to_polars(e.left), to_polars(e.right)
        if e.op in PYTHON_OPERATORS:
            return PYTHON_OPERATORS[e.op](a, b)
        if e.op == "/":
            return a.cast(pl.Float64) / b.cast(pl.Float64)
        if e.op == "%":
            # Spark's and Java's remainder takes the dividend's sign; polars' follows Python's floor.
            return (a.abs() % b.abs()) * a.sign()
    if isinstance(e, BoolOp):
        out = to_polars(e.args[0])
        for arg in e.args[1:]:
            out = (out & to_polars(arg)) if e.op == "and" else (out | to_polars(arg))
        return out
    if isinstance(e, Not):
        return ~to_polars(e.arg)
    if isinstance(e, IsIn):
        return to_polars(e.arg).is_in(list(e.values))
    if isinstance(e, Cast):
        return to_polars(e.arg).cast(_POLARS_TYPES[e.to])
    raise PlanError(f"no polars lowering for {type(e).__name__}")

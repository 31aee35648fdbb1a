"""Lower an `Expr` to a polars expression: the vectorised backend Lambda workers evaluate.

The semantics are the ones `core/expr.py` states (Spark's try_ mode); wherever polars' own operators
mean something else, the lowering says what it does instead and why. `to_polars` takes no schema (its
callers have none at hand), so where int64 and float64 need different handling the type is read
inside the plan: `pl.dtype_of` of a type witness, an expression with the node's type built from its
leaves only (never evaluated), so that no subtree is lowered twice and a plan does not grow
exponentially with the tree's depth.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import polars as pl

from core.errors import PlanError
from core.expr import (
    PYTHON_OPERATORS,
    BinOp,
    BoolOp,
    Cast,
    Col,
    DType,
    Expr,
    IsIn,
    Lit,
    Not,
    epoch_micros,
    lit,
)

TIMESTAMP = pl.Datetime("us", "UTC")
_POLARS_TYPES = {
    DType.INT64: pl.Int64,
    DType.FLOAT64: pl.Float64,
    DType.STRING: pl.Utf8,
    DType.BOOL: pl.Boolean,
    DType.TIMESTAMP: TIMESTAMP,
}
_I64_MAX = 2**63 - 1
_NULL_BOOL = pl.lit(None, dtype=pl.Boolean)
# Multiplying by this widens an int64 to int128 and leaves a float64 as it is (x * 1 is exact for
# every float, NaN and -0.0 included), without knowing which of the two the operand is.
_WIDEN = pl.lit(1, dtype=pl.Int128)
_CHECKED: dict[str, Callable[[pl.Expr, pl.Expr], pl.Expr]] = {
    "+": operator.add,
    "-": operator.sub,
    "*": operator.mul,
}


def _witness(e: Expr) -> pl.Expr:
    """An expression of `e`'s polars type, for `pl.dtype_of`: typed nulls, and columns under arithmetic."""
    if isinstance(e, Col):
        return pl.col(e.name)
    if isinstance(e, BinOp) and e.op in ("+", "-", "*", "%"):
        return _witness(e.left) + _witness(e.right)  # int64 with int64 stays int64, else float64
    if isinstance(e, Lit):
        return pl.lit(None, dtype=_POLARS_TYPES[e.type_])
    if isinstance(e, Cast):
        return pl.lit(None, dtype=_POLARS_TYPES[e.to])
    if isinstance(e, BinOp) and e.op == "/":
        return pl.lit(None, dtype=pl.Float64)
    return pl.lit(None, dtype=pl.Boolean)  # comparisons, and, or, not, isin


def _checked(e: BinOp, a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """`a op b` for + - *, null where an int64 result overflows (polars' own operators wrap).

    The operation runs in int128, where no product or sum of two int64 overflows, and the non-strict
    cast back to the node's type makes an out-of-range value null; floats pass through.
    """
    f = _CHECKED[e.op]
    return f(a * _WIDEN, b * _WIDEN).cast(pl.dtype_of(_witness(e)), strict=False)


def _by_numpy(ufunc: np.ufunc) -> Callable[[Sequence[pl.Series]], pl.Series]:
    """`ufunc(a, b)` on a batch, null where an operand is null or the divisor is zero."""

    def apply(args: Sequence[pl.Series]) -> pl.Series:
        a, b = args
        undefined = (a.is_null() | b.is_null() | (b == 0)).to_numpy()
        with np.errstate(all="ignore"):  # zero divisors; their rows become null below
            values = ufunc(a.fill_null(0).to_numpy(), b.fill_null(1).to_numpy())
        out = pl.Series(a.name, values)
        return out.scatter(np.flatnonzero(undefined), None) if undefined.any() else out

    return apply


_DIVIDE = _by_numpy(np.divide)
_FMOD = _by_numpy(np.fmod)


def _divide(a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """Float division, null for a zero divisor (polars gives +-inf or NaN), correctly rounded.

    numpy, not polars' `/`: polars divides by a constant as a multiplication by its reciprocal,
    which is off in the last bit (1e308 / 1e17 gives 1.0000000000000001e291).
    """
    args = [a.cast(pl.Float64), b.cast(pl.Float64)]
    return pl.map_batches(args, _DIVIDE, return_dtype=pl.Float64, is_elementwise=True)


def _remainder(e: BinOp, a: pl.Expr, b: pl.Expr) -> pl.Expr:
    """Truncated remainder (the dividend's sign), null for a zero divisor.

    numpy's fmod, not polars' `%`: polars floors, and for floats computes a - b * floor(a / b), which
    is off in the last bits (5.3 % 0.7) or entirely (1e17 % 3.3 gives 0) and NaN for x % inf. fmod is
    exact, and for int64 it is C's `%` (int64's minimum % -1 is 0).
    """
    return pl.map_batches([a, b], _FMOD, return_dtype=pl.dtype_of(_witness(e)), is_elementwise=True)


def _to_int64(x: pl.Expr) -> pl.Expr:
    """Truncate toward zero; NaN, +-inf and values outside int64 become null (polars' strict cast raises).

    2.0**63 is the one out-of-range float Spark lets through, as int64's maximum: its range check
    compares in double, where int64's maximum rounds up to 2.0**63. An int64 operand never takes
    that branch, since its non-strict cast is never null.
    """
    as_int = x.cast(pl.Int64, strict=False)
    return pl.when(as_int.is_null() & (x == 2.0**63)).then(pl.lit(_I64_MAX, dtype=pl.Int64)).otherwise(as_int)


def _literal(e: Lit) -> pl.Expr:
    if e.type_ == DType.TIMESTAMP and e.value is not None:
        return pl.lit(epoch_micros(e.value), dtype=pl.Int64).cast(TIMESTAMP)
    return pl.lit(e.value, dtype=_POLARS_TYPES.get(e.type_))


def _always_null(e: Expr) -> bool:
    """Whether `e` is null on every row: a null literal, or a cast, NOT or operator over one."""
    if isinstance(e, Lit):
        return e.value is None
    if isinstance(e, Cast | Not):
        return _always_null(e.arg)
    if isinstance(e, BinOp):
        return _always_null(e.left) or _always_null(e.right)
    return False


def _isin(e: IsIn) -> pl.Expr:
    """SQL's IN: an OR of equalities, so null operands and nulls in the list give null as in Spark.

    polars' `is_in` says false for a miss against a list holding a null, and refuses an int64 operand
    with float values (and the reverse). As in Spark, a float anywhere makes the comparison float64.
    """
    x = to_polars(e.arg)
    if not e.values:
        return x.is_null() & pl.lit(False)  # false for every row, nulls included
    values: list[Any] = [v for v in e.values if v is not None]
    if any(isinstance(v, float) for v in values):
        x = x.cast(pl.Float64)
        values = [float(v) for v in values]
    hits = [x == _literal(lit(v)) for v in values]
    if None in e.values:
        hits.append(_NULL_BOOL)  # x = null is null; not spelled so, see to_polars' comparisons
    out = hits[0]
    for h in hits[1:]:
        out = out | h
    return out


def to_polars(e: Expr) -> pl.Expr:
    if isinstance(e, Col):
        return pl.col(e.name)
    if isinstance(e, Lit):
        return _literal(e)
    if isinstance(e, BinOp):
        a, b = to_polars(e.left), to_polars(e.right)
        if e.op in PYTHON_OPERATORS:
            if _always_null(e):
                # polars folds `x < null` to a literal, and comparing another folded literal with it
                # (`(NOT null) == (x < null)`) yields one row instead of one per input row.
                return _NULL_BOOL
            return PYTHON_OPERATORS[e.op](a, b)
        if e.op in _CHECKED:
            return _checked(e, a, b)
        if e.op == "/":
            return _divide(a, b)
        if e.op == "%":
            return _remainder(e, a, b)
    if isinstance(e, BoolOp):
        out = to_polars(e.args[0])
        for arg in e.args[1:]:
            out = (out & to_polars(arg)) if e.op == "and" else (out | to_polars(arg))
        return out
    if isinstance(e, Not):
        return ~to_polars(e.arg)
    if isinstance(e, IsIn):
        return _isin(e)
    if isinstance(e, Cast):
        if e.to == DType.INT64:
            return _to_int64(to_polars(e.arg))
        if e.to in _POLARS_TYPES:
            return to_polars(e.arg).cast(_POLARS_TYPES[e.to])
    raise PlanError(f"no polars lowering for {type(e).__name__}")

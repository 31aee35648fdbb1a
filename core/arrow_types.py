"""Our column types and their Arrow types, in one table for the generator, the workers and the queries."""

from __future__ import annotations

import pyarrow as pa

from core.errors import PlanError
from core.expr import DType

TIMESTAMP = pa.timestamp("us", tz="UTC")

ARROW_TYPES: dict[DType, pa.DataType] = {
    DType.INT64: pa.int64(),
    DType.FLOAT64: pa.float64(),
    DType.STRING: pa.string(),
    DType.BOOL: pa.bool_(),
    DType.TIMESTAMP: TIMESTAMP,
}


def to_dtype(t: pa.DataType) -> DType:
    """Our column type of an Arrow type (the inverse of the type table above)."""
    if pa.types.is_integer(t):
        return DType.INT64
    if pa.types.is_floating(t):
        return DType.FLOAT64
    if pa.types.is_timestamp(t):
        return DType.TIMESTAMP
    if pa.types.is_boolean(t):
        return DType.BOOL
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return DType.STRING
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t):
        return DType.RECORDS
    raise PlanError(
        f"unsupported column type {t}", hint="columns are int64, double, string, bool or timestamp"
    )

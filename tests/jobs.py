"""Jobs that are not NEXMark, for tests of a user's own plan: their own schema and data."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa

from core.expr import DType, col
from core.plan import LogicalPlan, WindowSpec
from core.query import QueryBuilder, agg

VIEW_COLUMNS = {"user": DType.INT64, "page": DType.STRING, "at": DType.TIMESTAMP, "ms": DType.INT64}


def page_views() -> LogicalPlan:
    """Page views per page and sliding window: how many, and the seconds spent on them."""
    q = QueryBuilder("page_views")
    (
        q.source("view", VIEW_COLUMNS)
        .filter(col("ms") > 0)
        .map(page=col("page"), at=col("at"), secs=col("ms") / 1000)
        .key_by("page")
        .window_aggregate(WindowSpec(10, 2, on="at"), views=agg("count"), dwell=agg("sum", col("secs")))
        .sink()
    )
    return q.build()


def views(n: int) -> pa.Table:
    """`n` page views, one every 7 ms, some with no dwell time (filtered out)."""
    start = datetime(2026, 11, 26, tzinfo=UTC)
    return pa.table(
        {
            "user": pa.array([i % 97 for i in range(n)], pa.int64()),
            "page": pa.array([f"/p{i % 13}" for i in range(n)]),
            "at": pa.array(
                [start + timedelta(milliseconds=7 * i) for i in range(n)], pa.timestamp("us", "UTC")
            ),
            "ms": pa.array([(i * 31) % 900 - 100 for i in range(n)], pa.int64()),
        }
    )

"""Which operator pairs run as one: the shapes the lowering fuses and the offload chains follow."""

from __future__ import annotations

import pytest

from core.expr import col
from core.fusions import join_count_fusable, join_counts
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES
from core.plan import WINDOW, AggCall, WindowAggregate, WindowJoin, WindowSpec


def test_only_q8_counts_a_join() -> None:
    found = {name: join_counts(info.plan(QueryParams())) for name, info in QUERIES.items()}
    assert found.pop("q8") == {"window_join6": ("key_by7", "window_aggregate8")}
    assert not any(found.values()), found


@pytest.mark.parametrize(
    ("window", "condition", "keys", "fn", "expected"),
    [
        (WindowSpec(10, 10), None, (WINDOW, "id", "name"), "count", True),
        (WindowSpec(10, 2), None, (WINDOW, "id", "name"), "count", False),  # sliding: rows in many windows
        (WindowSpec(10, 10), col("price") > 1, (WINDOW, "id", "name"), "count", False),
        (WindowSpec(10, 10), None, ("id", "name"), "count", False),  # the count must stay per window
        (WindowSpec(10, 10), None, (WINDOW, "id", "name"), "max", False),
    ],
)
def test_fusable(
    window: WindowSpec, condition: object, keys: tuple[str, ...], fn: str, expected: bool
) -> None:
    join = WindowJoin(("id",), ("seller",), window, "a_date_time", condition)  # type: ignore[arg-type]
    agg = WindowAggregate(keys, None, (AggCall("auctions", fn, col("price") if fn != "count" else None),))
    assert join_count_fusable(join, agg) is expected

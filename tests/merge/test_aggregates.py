"""Every aggregate obeys the merge law the redirect-and-merge path relies on (in its reference
semantics), and the query builder's signatures, the fold rules and the reference name the same set."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.aggregate_signatures import SIGNATURES, signature
from core.errors import PlanError
from merge.algebra import KINDS
from tests.merge.reference_semantics import AGGREGATES, aggregate, fold

values = st.lists(st.integers(-1000, 1000), max_size=40)


def _canon(x: object) -> object:
    return Counter(map(repr, x)) if isinstance(x, list) else x


@pytest.mark.parametrize("name", ["count", "sum", "min", "max", "avg"])
@given(a=values, b=values)
def test_merge_of_partials_equals_whole(name: str, a: list[int], b: list[int]) -> None:
    fn = aggregate(name)
    merged = fn.extract(fn.merge(fold(fn, a), fold(fn, b)))
    assert merged == fn.extract(fold(fn, a + b))


@given(a=values, b=values)
def test_max_with_ties_keeps_every_record_at_the_maximum(a: list[int], b: list[int]) -> None:
    fn = aggregate("max_with_ties")
    items_a = [(v, {"v": v, "i": i}) for i, v in enumerate(a)]
    items_b = [(v, {"v": v, "i": 1000 + i}) for i, v in enumerate(b)]
    merged = fn.extract(fn.merge(fold(fn, items_a), fold(fn, items_b)))
    whole = fn.extract(fold(fn, items_a + items_b))
    assert _canon(merged) == _canon(whole)
    if a + b:
        top = max(a + b)
        assert sorted(r["i"] for r in whole) == sorted(r["i"] for _, r in items_a + items_b if r["v"] == top)
    else:  # no records: no maximum, and nothing kept
        assert whole == [] and merged == []


def test_unknown_aggregate_names_the_choices() -> None:
    with pytest.raises(PlanError, match="unknown aggregate 'median'"):
        signature("median")
    names = {"count", "sum", "min", "max", "avg", "max_with_ties", "latest_n"}
    assert set(SIGNATURES) == set(KINDS) == set(AGGREGATES) == names

"""The fused top-k's rank, free of Spark: ranking parts of a window's keys apart and merging their
candidates is ranking the whole window, ties and nulls included."""

from __future__ import annotations

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from core.nexmark.params import QueryParams
from core.nexmark.queries import get_query
from core.plan import AggCall, TopK, WindowAggregate, WindowSpec
from merge.sliding_top_k import SlidingTopK, fused_top_ks

COUNT = AggCall("n", "count")
AGG = WindowAggregate(("key",), WindowSpec(10, 2), (COUNT,))


def _panes(rows: list[tuple[int, int]]) -> pl.DataFrame:
    """Pane partial rows of one window: (key, count)."""
    return pl.DataFrame(rows, schema={"key": pl.Int64, "n": pl.Int64}, orient="row")


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 12), st.integers(1, 4)), max_size=40),
    parts=st.lists(st.integers(0, 3), min_size=13, max_size=13),
    k=st.integers(1, 4),
)
def test_the_candidates_of_parts_of_the_keys_merge_into_the_windows_top_k(
    rows: list[tuple[int, int]], parts: list[int], k: int
) -> None:
    spec = SlidingTopK.of(AGG, TopK(k, "n", (), True))
    panes = _panes(rows)
    whole = spec.candidates(panes)
    split = [panes.filter(pl.col("key").is_in([x for x in range(13) if parts[x] == i])) for i in range(4)]
    candidates = [spec.candidates(p) for p in split if p.height]
    merged = spec.top(pl.concat(candidates, how="vertical_relaxed")) if candidates else whole
    assert sorted(merged.iter_rows()) == sorted(whole.iter_rows())
    if rows:  # ties kept: every key at the k-th largest count or above
        counts = panes.group_by("key").agg(pl.col("n").sum())["n"].sort(descending=True)
        kth = counts[min(k, counts.len()) - 1]
        assert whole.height == counts.filter(counts >= kth).len()


def test_a_window_ranked_by_workers_is_their_candidates_merged() -> None:
    spec = SlidingTopK.of(AGG, TopK(1, "n", (), True))
    panes = _panes([(1, 5), (2, 1)])
    out = spec.rank(panes, 10_000, _panes([(7, 3), (8, 3), (9, 1)]))
    assert sorted(out["key"].to_list()) == [7, 8]  # the workers' candidates, not the panes
    assert out["window_start"].dt.epoch("ms").to_list() == [0, 0]


def test_q5s_top_k_is_fused_with_its_sliding_count() -> None:
    plan = get_query("q5").plan(QueryParams())
    (top_id,) = fused_top_ks(plan)
    agg_id, agg, top = fused_top_ks(plan)[top_id]
    assert (top_id, agg_id, top.k, top.with_ties) == ("top_k5", "window_aggregate3", 1, True)
    assert SlidingTopK.of(agg, top).keys == ("auction",)
    assert fused_top_ks(get_query("q4").plan(QueryParams())) == {}

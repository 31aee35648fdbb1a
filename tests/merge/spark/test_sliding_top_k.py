"""The fused sliding-window top-k: its ranking against a brute force, and its processor's state
handling driven through a fake state handle (the Spark run itself is in test_queries/test_offload_run)."""

from __future__ import annotations

from collections import defaultdict

import pandas as pd
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.expr import col
from core.fusions import join_counts
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES
from core.plan import AggCall, TopK, WindowAggregate, WindowSpec
from core.spark.lower import _fusions, state_store_for
from core.spark.session import HDFS_STATE_STORE, ROCKSDB_STATE_STORE
from merge.sliding_top_k import SlidingTopK, fusable
from merge.spark.sliding_top_k import PaneProcessor
from tests.merge.spark.state_fakes import FakeHandle, run_epochs

S = 1000  # ms
COUNT = AggCall("num", "count")


def spec(k: int = 1, size: int = 10, slide: int = 2, aggs: tuple[AggCall, ...] = (COUNT,)) -> SlidingTopK:
    columns = ["key"]
    for a in aggs:
        columns += [f"{a.out}__sum", f"{a.out}__count"] if a.fn == "avg" else [a.out]
    return SlidingTopK(size * S, slide * S, ("key",), aggs, k, aggs[0].out, tuple(columns))


def test_a_pane_belongs_to_size_over_slide_windows() -> None:
    assert list(spec().window_ends(0)) == [2 * S, 4 * S, 6 * S, 8 * S, 10 * S]
    assert list(spec(size=4, slide=2).window_ends(6 * S)) == [8 * S, 10 * S]


def test_rank_keeps_ties_at_the_kth_value_and_stamps_the_window() -> None:
    panes = pl.DataFrame({"key": [1, 2, 3, 1, 2, 4], "num": [3, 5, 4, 2, 0, 5]})  # totals 5, 5, 4, 5
    out = spec(k=1).rank(panes, end_ms=10 * S)
    assert sorted(out.get_column("key").to_list()) == [1, 2, 4]
    assert out.get_column("num").to_list() == [5, 5, 5]
    assert out.get_column("window_start").dt.epoch("ms").unique().to_list() == [0]
    assert out.get_column("window_end").dt.epoch("ms").unique().to_list() == [10 * S]
    assert sorted(spec(k=4).rank(panes, 10 * S).get_column("key").to_list()) == [1, 2, 3, 4]
    assert spec(k=9).rank(panes, 10 * S).height == 4  # k beyond the rows keeps them all


def test_rank_folds_avg_from_pane_sums_and_counts() -> None:
    avg = AggCall("mean", "avg", col("price"))
    panes = pl.DataFrame({"key": [1, 1, 2], "mean__sum": [10.0, 20.0, 9.0], "mean__count": [1, 3, 1]})
    out = spec(aggs=(avg,)).rank(panes, 10 * S)
    assert out.select("key", "mean").rows() == [(2, 9.0)]  # 30/4 = 7.5 for key 1


def brute_force(rows: list[tuple[int, int, int]], size: int, slide: int, k: int) -> set[tuple[int, int, int]]:
    """(window end, key, count) of the top-k with ties, from (pane start, key, count) rows."""
    windows: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    for pane, key, n in rows:
        for end in range(pane + slide, pane + size + 1, slide):
            windows[end][key] += n
    out = set()
    for end, counts in windows.items():
        ranked = sorted(counts.values(), reverse=True)
        kth = ranked[min(k, len(ranked)) - 1]
        out |= {(end, key, n) for key, n in counts.items() if n >= kth}
    return out


def drive(processor: PaneProcessor, handle: FakeHandle, epochs: list[tuple[int, pd.DataFrame]]) -> set:
    out = run_epochs(processor, handle, epochs)
    got = pd.concat(out) if out else pd.DataFrame(columns=["window_end", "key", "num"])
    return {(int(r.window_end.timestamp() * S), int(r.key), int(r.num)) for r in got.itertuples(index=False)}


def as_input(rows: list[tuple[int, int, int]]) -> pd.DataFrame:
    """The operator's input columns in order: pane start (µs), values, group."""
    frame = pd.DataFrame(rows, columns=["pane_ms", "key", "num"])
    return pd.DataFrame(
        {
            "us": frame.pane_ms * 1000,
            "key": frame.key,
            "num": frame.num,
            "g": 0,
        }
    )


rows_strategy = st.lists(
    st.tuples(st.integers(0, 12), st.integers(1, 6), st.integers(0, 9), st.integers(0, 2)),
    min_size=1,
    max_size=60,
)


@settings(max_examples=60, deadline=None)
@given(rows=rows_strategy, k=st.integers(1, 3), size_panes=st.integers(1, 5), epoch_panes=st.integers(1, 3))
def test_the_processor_ranks_every_window_once_as_the_brute_force_does(
    rows: list[tuple[int, int, int, int]], k: int, size_panes: int, epoch_panes: int
) -> None:
    """Partial rows (pane, key, count) arrive unfolded, a pane's rows spread over up to three epochs
    before the watermark passes the pane's start, several panes per epoch; the end-of-stream
    watermark closes every window."""
    slide = 2 * S
    s = spec(k=k, size=2 * size_panes, slide=2)
    step = epoch_panes * slide
    arrivals: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for p, key, n, lag in rows:
        arrivals[max(p * slide // step - lag, 0)].append((p * slide, key, n))
    handle = FakeHandle()
    processor = PaneProcessor(s)
    processor.init(handle)  # type: ignore[arg-type]
    epochs = [(i * step, as_input(arrivals[i])) for i in range(14 * slide // step + 1)]
    epochs.append((10**9, as_input([])))
    expected = brute_force([(p * slide, key, n) for p, key, n, _ in rows], s.size_ms, slide, k)
    assert drive(processor, handle, epochs) == expected
    assert not handle.map.d, "panes outlive the windows that need them"


def test_rows_of_a_pane_whose_first_window_is_ranked_are_late_and_dropped() -> None:
    handle = FakeHandle()
    processor = PaneProcessor(spec(size=4, slide=2))
    processor.init(handle)  # type: ignore[arg-type]
    epochs = [
        (0, as_input([(0, 1, 5), (2 * S, 2, 3)])),
        (2 * S, as_input([])),
        (2 * S, as_input([(0, 2, 9)])),
    ]
    epochs.append((10**9, as_input([])))
    assert drive(processor, handle, epochs) == {(2 * S, 1, 5), (4 * S, 1, 5), (6 * S, 2, 3)}


def test_queries_on_transform_with_state_take_the_rocksdb_store_while_the_others_keep_the_default() -> None:
    params = QueryParams()
    for name, info in QUERIES.items():
        plan = info.plan(params)
        assert bool(_fusions(plan)) == (name == "q5"), name
        assert bool(join_counts(plan)) == (name == "q8"), name
        on_tws = name in ("q3", "q4", "q5", "q6", "q7", "q8")  # fused, keyed, or keeping records
        assert state_store_for(plan) == (ROCKSDB_STATE_STORE if on_tws else HDFS_STATE_STORE), name


@pytest.mark.parametrize(
    ("window", "fn", "with_ties", "expected"),
    [
        (WindowSpec(10, 2), "count", True, True),
        (WindowSpec(10, 10), "count", True, False),  # tumbling: no panes to fold
        (WindowSpec(10, 2), "max_with_ties", True, False),
        (WindowSpec(10, 2), "count", False, False),
    ],
)
def test_fusable(window: WindowSpec, fn: str, with_ties: bool, expected: bool) -> None:
    agg = WindowAggregate(("key",), window, (AggCall("num", fn, col("price") if fn != "count" else None),))
    assert fusable(agg, TopK(1, "num", (), with_ties)) is expected

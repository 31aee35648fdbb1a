"""The pane step: every (pane, key) emitted once, folded, however the batches and the keys are cut."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import PlanError
from core.expr import col
from core.plan import AggCall, WindowAggregate, WindowSpec
from merge.keyed_groups import Frames
from merge.keyed_step import SIDE, key_column, next_due, select
from merge.pane_step import PANES, PaneStep

SLIDE_S = 2
AGG = WindowAggregate(
    ("auction",),
    WindowSpec(10, SLIDE_S),
    (AggCall("num_bids", "count"), AggCall("top", "max", arg=col("top"))),
)
STEP = PaneStep(AGG, ("num_bids", "top"))
K = key_column(0)


def _frame(rows: list[tuple[int, int, int]]) -> pl.DataFrame:
    """(ms, auction, value) records in partial form, laid out as the step's input."""
    return pl.DataFrame(
        {
            SIDE: [0] * len(rows),
            K: [a for _, a, _ in rows],
            "date_time": [ms * 1000 for ms, _, _ in rows],
            "auction": [a for _, a, _ in rows],
            "num_bids": [1] * len(rows),
            "top": [v for _, _, v in rows],
        },
        schema={SIDE: pl.Int32, K: pl.Int64, "date_time": pl.Int64, "auction": pl.Int64}
        | {"num_bids": pl.Int64, "top": pl.Int64},
    ).with_columns(pl.col("date_time").cast(pl.Datetime("us", "UTC")))


def _panes(out: pl.DataFrame | None) -> Counter:
    """(pane start ms, auction, count, max) of emitted rows; each row's instant floors to its pane."""
    if out is None:
        return Counter()
    ms = out["date_time"].dt.epoch("ms")
    return Counter(
        (m - m % (SLIDE_S * 1000), a, n, t)
        for m, a, n, t in zip(ms, out["auction"], out["num_bids"], out["top"], strict=True)
    )


def _brute_force(rows: list[tuple[int, int, int]]) -> Counter:
    groups: dict[tuple[int, int], list[int]] = {}
    for ms, a, v in rows:
        groups.setdefault((ms - ms % (SLIDE_S * 1000), a), []).append(v)
    return Counter((p, a, len(vs), max(vs)) for (p, a), vs in groups.items())


rows_strategy = st.lists(
    st.tuples(st.integers(0, 20_000), st.integers(0, 5), st.integers(-50, 50)), min_size=1, max_size=60
)


@settings(max_examples=80, deadline=None)
@given(
    rows=rows_strategy,
    cuts=st.lists(st.integers(0, 60), max_size=6),
    moved=st.lists(st.sets(st.integers(0, 5)), min_size=7, max_size=7),
)
def test_every_pane_once_whatever_the_batches_and_the_split_of_keys(
    rows: list[tuple[int, int, int]], cuts: list[int], moved: list[set[int]]
) -> None:
    """Rows arrive in time order in batches; each batch's watermark is its latest row's time (no row
    is late). A batch runs on the keys it touches and the keys falling due (selected out of the state,
    as a seal does) plus some others, and is joined back: over all batches and a last expiry, every
    (pane, key) comes out once, folded, and only after the watermark passed its end."""
    rows = sorted(rows)
    bounds = sorted({0, len(rows), *[c for c in cuts if c < len(rows)]})
    state: Frames = {}
    got: Counter = Counter()
    for n, (a, b) in enumerate(pairwise(bounds)):
        new = _frame(rows[a:b])
        watermark = rows[b - 1][0]
        extra = pl.DataFrame({"auction": sorted(moved[n % 7])}, schema={"auction": pl.Int64})
        needed, rest = select(STEP, state, pl.concat([new.select("auction"), extra]), watermark)
        stepped = STEP.step(needed, new, watermark)
        whole = STEP.step(state, new, watermark)
        assert _panes(stepped.out) == _panes(whole.out) and stepped.decided == whole.decided
        for pane, *_ in _panes(stepped.out):
            assert pane + SLIDE_S * 1000 <= watermark
        state = STEP.joined(stepped.state, rest)
        got += _panes(stepped.out)
    last = STEP.expire(state, 10**15)
    got += _panes(last.out)
    assert got == _brute_force(rows)
    assert last.state[PANES] is None or last.state[PANES].height == 0
    assert next_due(STEP, last.state) is None


def test_a_pane_falls_due_at_its_end_and_its_row_is_inside_it() -> None:
    state = STEP.step({}, _frame([(2_500, 1, 7), (3_900, 1, 9), (4_100, 2, 1)]), 3_999).state
    assert next_due(STEP, state) == 4_000
    assert STEP.due_keys(state, 3_999) is not None and STEP.due_keys(state, 3_999).height == 0
    closed = STEP.expire(state, 4_000)
    assert _panes(closed.out) == Counter({(2_000, 1, 2, 9): 1})
    assert closed.out is not None and closed.out["date_time"].dt.epoch("us").to_list() == [3_999_999]
    assert next_due(STEP, closed.state) == 6_000


def test_of_names_the_partial_columns_and_refuses_what_has_no_panes() -> None:
    assert PaneStep.of(AGG).values == ("num_bids", "top")
    avg = WindowAggregate(("a",), WindowSpec(10, 2), (AggCall("p", "avg", arg=col("p")),))
    assert len(PaneStep.of(avg).values) == 2
    with pytest.raises(PlanError, match="no pane step"):
        PaneStep.of(WindowAggregate(("a",), None, (AggCall("n", "count"),)))

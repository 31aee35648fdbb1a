"""The unwindowed join's step: every pair once, however the rows are cut into batches and however its
keys are split between places (the premise of moving key groups and single keys to workers)."""

from __future__ import annotations

from collections import Counter
from itertools import pairwise

import polars as pl
from hypothesis import given, settings
from hypothesis import strategies as st

from core.expr import col
from core.plan import WindowJoin
from merge.join_step import LEFTS, RIGHTS, JoinStep
from merge.keyed_groups import Frames
from merge.keyed_step import SIDE, key_column, keys_of, next_due, select, take

STEP = JoinStep.of(WindowJoin(("p_id",), ("seller",), None), ("p_id", "name"), ("id", "seller"))
K = key_column(0)


def _frame(rows: list[tuple[int, int | None, int]]) -> pl.DataFrame:
    """(side, key, value) rows in the step's input layout: a person (p_id, name) or an auction."""
    data = [
        {SIDE: s, K: k, "p_id": k if s == 0 else None, "name": f"n{v}" if s == 0 else None}
        | {"id": v if s == 1 else None, "seller": k if s == 1 else None}
        for s, k, v in rows
    ]
    schema = {
        SIDE: pl.Int32,
        K: pl.Int64,
        "p_id": pl.Int64,
        "name": pl.Utf8,
        "id": pl.Int64,
        "seller": pl.Int64,
    }
    return pl.DataFrame(data, schema=schema, orient="row").select(STEP.columns)


def _pairs(out: pl.DataFrame | None) -> Counter:
    return Counter(out.iter_rows()) if out is not None else Counter()


def _brute_force(rows: list[tuple[int, int | None, int]]) -> Counter:
    persons = [(k, f"n{v}") for s, k, v in rows if s == 0 and k is not None]
    auctions = [(v, k) for s, k, v in rows if s == 1 and k is not None]
    return Counter((p, n, a, seller) for p, n in persons for a, seller in auctions if p == seller)


rows_strategy = st.lists(
    st.tuples(st.integers(0, 1), st.one_of(st.none(), st.integers(0, 5)), st.integers(0, 50)),
    min_size=1,
    max_size=40,
)


@settings(max_examples=80, deadline=None)
@given(
    rows=rows_strategy,
    cuts=st.lists(st.integers(0, 40), max_size=6),
    moved=st.lists(st.sets(st.integers(0, 5)), min_size=7, max_size=7),
)
def test_every_pair_once_whatever_the_batches_and_the_split_of_keys(
    rows: list[tuple[int, int | None, int]], cuts: list[int], moved: list[set[int]]
) -> None:
    """Each batch runs on the keys it touches (selected out of the state, as lazy fetch does) plus
    some other keys, the rest staying apart; joined back after each batch, the outputs over all
    batches are the brute-force join, each pair once."""
    bounds = sorted({0, len(rows), *[c for c in cuts if c < len(rows)]})
    state: Frames = {}
    got: Counter = Counter()
    for n, (a, b) in enumerate(pairwise(bounds)):
        new = _frame(rows[a:b])
        extra = pl.DataFrame({K: sorted(moved[n % 7])}, schema={K: pl.Int64})
        needed, rest = select(STEP, state, pl.concat([new.select(K), extra]), 0)
        stepped = STEP.step(needed, new, 0)
        whole = STEP.step(state, new, 0)
        assert _pairs(stepped.out) == _pairs(whole.out) and stepped.decided == whole.decided
        state = STEP.joined(stepped.state, rest)
        got += _pairs(stepped.out)
    assert got == _brute_force(rows)
    kept = keys_of(STEP, state)
    assert kept is None or kept[K].null_count() == 0  # null keys match nothing and are not kept


def test_take_moves_both_sides_of_a_key_and_nothing_falls_due() -> None:
    state = STEP.step({}, _frame([(0, 1, 1), (1, 1, 2), (0, 2, 3)]), 0).state
    mine, rest = take(STEP, state, pl.DataFrame({K: [1]}))
    assert mine[LEFTS]["p_id"].to_list() == [1] and mine[RIGHTS]["seller"].to_list() == [1]  # type: ignore[index]
    assert rest[LEFTS]["p_id"].to_list() == [2] and rest[RIGHTS].height == 0  # type: ignore[index]
    assert STEP.due_keys(state, 10**15) is None and next_due(STEP, state) is None
    assert STEP.expire(state, 10**15).state == state


def test_a_condition_filters_the_pairs() -> None:
    step = JoinStep.of(
        WindowJoin(("p_id",), ("seller",), None, condition=col("id") > 5), STEP.left, STEP.right
    )
    out = step.step({}, _frame([(0, 1, 1), (1, 1, 2), (1, 1, 9)]), 0).out
    assert out is not None and out["id"].to_list() == [9]

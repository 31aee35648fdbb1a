"""The winner step against a brute force: any cut of the stream into batches, any split of its keys."""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.expr import col
from merge.keyed_step import SIDE, key_column, keys_of, select, take
from merge.winner import LID, WinnerSpec, WinnerState, expire, joined, state_frames, state_of, step

pytestmark = pytest.mark.timeout(120)

S = 1_000_000  # µs
LEFT = ("a_id", "reserve", "a_date_time", "expires")
RIGHT = ("b_auction", "price", "b_date_time")
SPEC = WinnerSpec(
    n_keys=1,
    left=LEFT,
    right=RIGHT,
    timestamps=("a_date_time", "expires", "b_date_time"),
    opens="a_date_time",
    closes="expires",
    at="b_date_time",
    by="price",
    condition=col("price") >= col("reserve"),
)
END_MS = 10**12

auctions = st.lists(
    st.tuples(
        st.integers(0, 5), st.integers(0, 20), st.integers(1, 10), st.integers(0, 50)
    ),  # id, opens, life, reserve
    max_size=8,
    unique_by=lambda a: a[0],
)
bids = st.lists(
    st.tuples(st.integers(0, 6), st.integers(0, 35), st.integers(0, 60)), max_size=40
)  # auction, at, price


def _rows(
    auctions: list[tuple[int, int, int, int]], bids: list[tuple[int, int, int]]
) -> list[tuple[int, dict]]:
    """Every row at its event time (an auction at its opening), in the step's input columns."""
    rows = [
        (o, {SIDE: 0, "a_id": i, "reserve": r, "a_date_time": o * S, "expires": (o + life) * S})
        for i, o, life, r in auctions
    ]
    rows += [(t, {SIDE: 1, "b_auction": a, "price": p, "b_date_time": t * S}) for a, t, p in bids]
    return sorted(rows, key=lambda r: (r[0], r[1][SIDE]))


def _frame(rows: list[dict]) -> pl.DataFrame:
    ts = pl.Datetime("us", "UTC")
    schema = {SIDE: pl.Int32, key_column(0): pl.Int64, "a_id": pl.Int64, "reserve": pl.Int64}
    schema |= {"a_date_time": ts, "expires": ts, "b_auction": pl.Int64, "price": pl.Int64, "b_date_time": ts}
    full = [{**r, key_column(0): r.get("a_id", r.get("b_auction"))} for r in rows]
    return pl.DataFrame(full, schema=schema, orient="row").select(SPEC.columns)


def _run(batches: list[list[tuple[int, dict]]]) -> set[tuple]:
    """Spark's way: each batch runs at the watermark of the batches before it; the end closes all."""
    state, watermark_ms, won = WinnerState(), 0, []
    for batch in batches:
        decided = step(SPEC, state, _frame([r for _, r in batch]), watermark_ms)
        state, won = decided.state, [*won, decided.won]
        if batch:
            watermark_ms = max(watermark_ms, max(t for t, _ in batch) * 1000)
    final = expire(SPEC, state, END_MS)
    return {tuple(r) for w in [*won, final.won] if w is not None for r in w.iter_rows()}


def _brute_force(auctions: list[tuple[int, int, int, int]], bids: list[tuple[int, int, int]]) -> set[tuple]:
    out = set()
    for i, o, life, r in auctions:
        inside = [(p, t) for a, t, p in bids if a == i and o <= t < o + life and p >= r]
        if inside:
            price, at = sorted(inside, key=lambda b: (-b[0], b[1]))[0]
            utc = [datetime.fromtimestamp(x, UTC) for x in (o, o + life, at)]
            out.add((i, r, utc[0], utc[1], i, price, utc[2]))
    return out


def _cut(rows: list[tuple[int, dict]], cuts: list[int]) -> list[list[tuple[int, dict]]]:
    """Batches ending at the event times in `cuts`: a batch holds whole instants, as the source's do."""
    batches, rest = [], rows
    for c in sorted(set(cuts)):
        batches.append([r for r in rest if r[0] <= c])
        rest = [r for r in rest if r[0] > c]
    return [*batches, rest]


@settings(max_examples=60, deadline=None)
@given(auctions=auctions, bids=bids, cuts=st.lists(st.integers(0, 35), max_size=6))
def test_any_cut_into_batches_decides_the_brute_force_winners(
    auctions: list[tuple[int, int, int, int]], bids: list[tuple[int, int, int]], cuts: list[int]
) -> None:
    assert _run(_cut(_rows(auctions, bids), cuts)) == _brute_force(auctions, bids)


@settings(max_examples=60, deadline=None)
@given(
    auctions=auctions,
    bids=bids,
    cuts=st.lists(st.integers(0, 35), max_size=6),
    owned=st.sets(st.integers(0, 6)),
)
def test_keys_stepped_apart_at_the_same_watermarks_decide_what_they_decide_together(
    auctions: list[tuple[int, int, int, int]],
    bids: list[tuple[int, int, int]],
    cuts: list[int],
    owned: set[int],
) -> None:
    """The step is key-local: the keys one holder owns and the rest, stepped apart over the same
    batches and watermarks, decide the winners of the whole. This is what lets a key group's state
    live elsewhere for a while."""
    batches = _cut(_rows(auctions, bids), cuts)

    def mine(row: dict, keep: bool) -> bool:
        return (row.get("a_id", row.get("b_auction")) in owned) == keep

    def side(keep: bool) -> set[tuple]:
        # Each holder sees only its rows, but the watermark is the stream's: every batch still runs.
        state, watermark_ms, won = WinnerState(), 0, set()
        for batch in batches:
            decided = step(SPEC, state, _frame([r for _, r in batch if mine(r, keep)]), watermark_ms)
            state = decided.state
            won |= {tuple(r) for r in decided.won.iter_rows()} if decided.won is not None else set()
            if batch:
                watermark_ms = max(watermark_ms, max(t for t, _ in batch) * 1000)
        final = expire(SPEC, state, END_MS).won
        return won | ({tuple(r) for r in final.iter_rows()} if final is not None else set())

    assert side(True) | side(False) == _brute_force(auctions, bids)


def test_a_replayed_batch_changes_nothing() -> None:
    rows = _rows([(1, 0, 10, 5)], [(1, 2, 7), (1, 3, 9)])
    first = step(SPEC, WinnerState(), _frame([r for _, r in rows]), 0)
    again = step(SPEC, first.state, _frame([r for _, r in rows if r[SIDE] == 1]), 0)
    assert again.state.open is not None and first.state.open is not None
    assert again.state.open.select("price").to_series().to_list() == [9]
    assert again.next_due_ms == first.next_due_ms == 3_001  # the pending bids' last instant, then the close


def _rows_of(state: WinnerState) -> tuple[list, list]:
    """A state's rows, entity numbers aside (they only name rows within a state), in a fixed order."""
    return tuple(  # type: ignore[return-value]
        sorted(map(repr, f.drop(LID, strict=False).iter_rows())) if f is not None else []
        for f in (state.open, state.pending)
    )


@settings(max_examples=60, deadline=None)
@given(
    auctions=auctions,
    bids=bids,
    cuts=st.lists(st.integers(0, 35), max_size=6),
    extra=st.lists(st.sets(st.integers(0, 6)), min_size=8, max_size=8),
)
def test_a_step_over_the_selected_keys_joined_with_the_rest_is_the_step_over_the_whole(
    auctions: list[tuple[int, int, int, int]],
    bids: list[tuple[int, int, int]],
    cuts: list[int],
    extra: list[set[int]],
) -> None:
    """Lazy fetch's premise: a batch needs only its keys' state and the entities its watermark closes;
    any other keys may come along or stay behind."""
    state, watermark_ms = WinnerState(), 0
    for n, batch in enumerate(_cut(_rows(auctions, bids), cuts)):
        new = _frame([r for _, r in batch])
        touched = pl.concat(
            [
                new.select(SPEC.keys),
                pl.DataFrame({key_column(0): sorted(extra[n % 8])}, schema={key_column(0): pl.Int64}),
            ]
        )
        whole = step(SPEC, state, new, watermark_ms)
        needed, rest = select(SPEC, state_frames(state), touched, watermark_ms)
        part = step(SPEC, state_of(needed), new, watermark_ms)
        assert _rows_of(joined(part.state, state_of(rest))) == _rows_of(whole.state)
        won = [{tuple(r) for r in d.won.iter_rows()} if d.won is not None else set() for d in (part, whole)]
        assert won[0] == won[1]
        state = joined(part.state, state_of(rest))
        if batch:
            watermark_ms = max(watermark_ms, max(t for t, _ in batch) * 1000)


def test_take_splits_a_state_by_keys_and_an_empty_key_set_takes_nothing() -> None:
    rows = _rows([(1, 0, 10, 5), (2, 0, 10, 5)], [(1, 2, 7), (2, 3, 9), (3, 4, 1)])
    state = state_frames(step(SPEC, WinnerState(), _frame([r for _, r in rows]), 0).state)
    mine, rest = take(SPEC, state, pl.DataFrame({key_column(0): [2, 3]}))
    assert keys_of(SPEC, mine)[key_column(0)].sort().to_list() == [2, 3]  # type: ignore[index]
    assert keys_of(SPEC, rest)[key_column(0)].to_list() == [1]  # type: ignore[index]
    nothing, everything = take(SPEC, state, None)
    assert keys_of(SPEC, nothing) is None and _rows_of(state_of(everything)) == _rows_of(state_of(state))

"""Known-answer tests for the DuckDB reference of NEXMark Q0-Q8 (docs/queries.md).

Every expected result here is worked out by hand from docs/queries.md, not computed, so the reference is
pinned to the contract itself: window boundaries, sliding membership, ties, the Q4/Q6 reserve and
expiry rules, Q6's last-10 rule, Q8's one row per person and window, and Q3's filters.
"""

from __future__ import annotations

import datetime as dt
import json
from types import SimpleNamespace
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from core.errors import ConfigError, InputError
from core.nexmark.params import QueryParams
from core.nexmark.reference import (
    DEFAULT_PARAMS,
    OUTPUT_SCHEMAS,
    QUERIES,
    compute_reference,
    reference_sql,
)

UTC = dt.UTC
TS = pa.timestamp("us", tz="UTC")
T0 = dt.datetime(2026, 1, 1, tzinfo=UTC)  # the generator's first event time; a multiple of 10 s


def at(seconds: float) -> dt.datetime:
    """T0 + seconds, exact to the microsecond."""
    return T0 + dt.timedelta(microseconds=round(seconds * 1_000_000))


def persons(rows: list[tuple[int, str, str, float]]) -> pa.Table:
    """Person table from (id, name, state, seconds after T0); other columns are filler."""
    return pa.table(
        {
            "id": pa.array([r[0] for r in rows], pa.int64()),
            "name": pa.array([r[1] for r in rows], pa.string()),
            "email_address": pa.array([f"{r[1]}@x" for r in rows], pa.string()),
            "credit_card": pa.array(["0000" for _ in rows], pa.string()),
            "city": pa.array([f"city-{r[0]}" for r in rows], pa.string()),
            "state": pa.array([r[2] for r in rows], pa.string()),
            "date_time": pa.array([at(r[3]) for r in rows], TS),
            "extra": pa.array(["" for _ in rows], pa.string()),
        }
    )


def auctions(rows: list[dict[str, Any]]) -> pa.Table:
    """Auction table from dicts with id, seller, t (seconds after T0) and optional category, reserve,
    expires (seconds after T0, default t + 1000)."""
    return pa.table(
        {
            "id": pa.array([r["id"] for r in rows], pa.int64()),
            "item_name": pa.array([f"item-{r['id']}" for r in rows], pa.string()),
            "description": pa.array(["" for _ in rows], pa.string()),
            "initial_bid": pa.array([1 for _ in rows], pa.int64()),
            "reserve": pa.array([r.get("reserve", 0) for r in rows], pa.int64()),
            "date_time": pa.array([at(r["t"]) for r in rows], TS),
            "expires": pa.array([at(r.get("expires", r["t"] + 1000)) for r in rows], TS),
            "seller": pa.array([r["seller"] for r in rows], pa.int64()),
            "category": pa.array([r.get("category", 1) for r in rows], pa.int64()),
            "extra": pa.array(["" for _ in rows], pa.string()),
        }
    )


def bids(rows: list[tuple[int, int, float]], bidder: int = 1) -> pa.Table:
    """Bid table from (auction, price, seconds after T0); bidder/extra derived so rows stay distinct."""
    return pa.table(
        {
            "auction": pa.array([r[0] for r in rows], pa.int64()),
            "bidder": pa.array([bidder + i for i, _ in enumerate(rows)], pa.int64()),
            "price": pa.array([r[1] for r in rows], pa.int64()),
            "channel": pa.array(["web" for _ in rows], pa.string()),
            "url": pa.array([f"u{i}" for i, _ in enumerate(rows)], pa.string()),
            "date_time": pa.array([at(r[2]) for r in rows], TS),
            "extra": pa.array([f"e{i}" for i, _ in enumerate(rows)], pa.string()),
        }
    )


def run(query: str, params: QueryParams = DEFAULT_PARAMS, **tables: pa.Table) -> list[tuple[Any, ...]]:
    """Compute `query`, check its schema is exactly the documented one, return sorted row tuples."""
    result = compute_reference(query, tables, params)
    assert result.schema == OUTPUT_SCHEMAS[query], result.schema
    return sorted(tuple(r.values()) for r in result.to_pylist())


def win(start_s: float, size_s: float = 10) -> tuple[dt.datetime, dt.datetime]:
    return at(start_s), at(start_s + size_s)


# --- schemas and errors -------------------------------------------------------------------------


def test_output_schemas_match_the_doc() -> None:
    wnd = [("window_start", TS), ("window_end", TS)]
    i64, f64, s = pa.int64(), pa.float64(), pa.string()
    expected = {
        "q0": [("auction", i64), ("bidder", i64), ("price", i64), ("channel", s), ("url", s),
               ("date_time", TS), ("extra", s)],
        "q1": [("auction", i64), ("bidder", i64), ("price", f64), ("date_time", TS)],
        "q2": [("auction", i64), ("price", i64)],
        "q3": [("name", s), ("city", s), ("state", s), ("id", i64)],
        "q4": [*wnd, ("category", i64), ("avg_price", f64)],
        "q5": [*wnd, ("auction", i64), ("num_bids", i64)],
        "q6": [("seller", i64), ("auction", i64), ("avg_price", f64)],
        "q7": [*wnd, ("auction", i64), ("bidder", i64), ("price", i64), ("date_time", TS), ("extra", s)],
        "q8": [*wnd, ("id", i64), ("name", s)],
    }  # fmt: skip
    assert tuple(f"q{i}" for i in range(9)) == QUERIES
    for query in QUERIES:
        assert OUTPUT_SCHEMAS[query] == pa.schema(expected[query]), query


@pytest.mark.parametrize("query", QUERIES)
def test_empty_inputs_give_empty_results_with_exact_schema(query: str) -> None:
    result = compute_reference(query, {"person": persons([]), "auction": auctions([]), "bid": bids([])})
    assert result.num_rows == 0
    assert result.schema == OUTPUT_SCHEMAS[query]


def test_unknown_query_is_a_config_error_listing_valid_names() -> None:
    with pytest.raises(ConfigError) as err:
        compute_reference("q9", {"bid": bids([])})
    assert "q0" in err.value.hint and "q8" in err.value.hint
    with pytest.raises(ConfigError):
        reference_sql("nope")


def test_missing_input_table_is_an_input_error() -> None:
    with pytest.raises(InputError):
        compute_reference("q3", {"person": persons([])})


def test_query_names_are_case_insensitive() -> None:
    assert compute_reference("Q2", {"bid": bids([(123, 5, 0)])}).to_pylist() == [{"auction": 123, "price": 5}]


def test_sql_has_the_window_parameters_in_microseconds() -> None:
    sql = reference_sql("q5", QueryParams(window_size_s=6, window_slide_s=3))
    assert "6000000" in sql and "3000000" in sql


# --- Q0-Q3 --------------------------------------------------------------------------------------


def test_q0_passes_every_bid_unchanged_and_drops_extra_columns() -> None:
    table = bids([(1, 10, 0.5), (2, 20, 30.25), (1, 10, 0.5)])
    with_extras = table.append_column("event_id", pa.array([4, 5, 6], pa.int64())).append_column(
        "arrival_time", table.column("date_time")
    )
    result = compute_reference("q0", {"bid": with_extras})
    assert result.schema == OUTPUT_SCHEMAS["q0"]
    assert sorted(result.to_pylist(), key=repr) == sorted(table.to_pylist(), key=repr)


def test_q1_converts_price_in_double() -> None:
    rows = run("q1", bid=bids([(1, 100, 1.0), (2, 7, 2.0), (3, 0, 3.0), (4, 9_000_000_000, 4.0)]))
    assert rows == [
        (1, 1, 100 * 0.908, at(1.0)),
        (2, 2, 7 * 0.908, at(2.0)),
        (3, 3, 0.0, at(3.0)),
        (4, 4, 9_000_000_000 * 0.908, at(4.0)),
    ]


def test_q2_selects_auctions_divisible_by_123() -> None:
    table = bids([(0, 1, 0), (123, 2, 0), (124, 3, 0), (246, 4, 0), (122, 5, 0), (-123, 6, 0), (1, 7, 0)])
    assert run("q2", bid=table) == [(-123, 6), (0, 1), (123, 2), (246, 4)]


def test_q3_filters_states_and_category_and_joins_unwindowed() -> None:
    people = persons(
        [
            (1, "ann", "OR", 0),
            (2, "bob", "WA", 0),
            (3, "cat", "CA", 0),
            (4, "dan", "ID", 0),
            (5, "eve", "or", 0),
        ]
    )
    lots = auctions(
        [
            {"id": 10, "seller": 1, "t": 5, "category": 10},
            {"id": 11, "seller": 2, "t": 5, "category": 10},  # WA: filtered out
            {"id": 12, "seller": 3, "t": 5, "category": 9},  # category 9: filtered out
            {"id": 13, "seller": 4, "t": 86_400 * 3, "category": 10},  # days later: still joined
            {"id": 14, "seller": 1, "t": -3600, "category": 10},  # before the person: still joined
            {"id": 15, "seller": 99, "t": 5, "category": 10},  # no such person
            {"id": 16, "seller": 5, "t": 5, "category": 10},  # "or" is not "OR"
        ]
    )
    assert run("q3", person=people, auction=lots) == [
        ("ann", "city-1", "OR", 10),
        ("ann", "city-1", "OR", 14),
        ("dan", "city-4", "ID", 13),
    ]


# --- winning bids (Q4 and Q6) -------------------------------------------------------------------
#
# An auction's winning bid: among its bids with open (auction.date_time) <= bid time < expires and
# price >= reserve, the highest price, the earliest bid on a price tie; no such bid, no winner. Q4
# and Q6 both start from it, so one case pins the rules for both.


def _winning_bid_rules() -> tuple[pa.Table, pa.Table, dict[int, int]]:
    """Auctions opened at 1 s, expiring at 30 s, reserve 100, each its own seller and category (its
    id); their bids; and the winning price per auction worked out by hand."""
    lots = auctions(
        [{"id": i, "seller": i, "category": i, "t": 1, "expires": 30, "reserve": 100} for i in range(1, 8)]
    )
    events = bids(
        [
            (1, 150, 2),
            (1, 180, 25),  # long after the auction's opening window [0, 10), before expiry: wins
            (2, 900, 30),  # exactly at expires: too late
            (2, 160, 29.999999),  # the last microsecond before expiry: wins
            (3, 900, 0.5),  # before the auction opened: does not count
            (3, 170, 1),  # exactly at the opening: wins
            (4, 99, 5),  # below the reserve, and the only bid: auction 4 has no winner
            (5, 100, 5),  # exactly at the reserve: wins
            # auction 6 has no bid at all: no winner
            (7, 120, 3),  # tie on price with the next bid: one winner (the earliest), not two
            (7, 120, 4),
            (7, 110, 5),
            (99, 5000, 5),  # a bid for an unknown auction
        ]
    )
    return lots, events, {1: 180, 2: 160, 3: 170, 5: 100, 7: 120}


# --- Q4 -----------------------------------------------------------------------------------------


def test_q4_averages_winning_bids_per_category_in_the_windows_of_the_close() -> None:
    lots, events, winners = _winning_bid_rules()
    # Every auction closes at 30 s: with W = 10, P = 2 that is in the windows starting at 22..30.
    expected = [(*win(s), c, float(price)) for s in (22, 24, 26, 28, 30) for c, price in winners.items()]
    assert run("q4", auction=lots, bid=events) == sorted(expected)


def test_q4_sliding_membership_is_by_close_time() -> None:
    lots = auctions(
        [
            # closes exactly on a boundary, 10 s: in the windows starting at 2, 4, 6, 8 and 10, not 0
            {"id": 1, "seller": 1, "category": 1, "t": 1, "expires": 10},
            # opened long before (its opening time plays no part), closes at 13: windows 4..12
            {"id": 2, "seller": 1, "category": 1, "t": -100, "expires": 13},
            # closes one microsecond before 10 s: windows 0..8, not 10
            {"id": 3, "seller": 1, "category": 2, "t": 1, "expires": 9.999999},
        ]
    )
    events = bids([(1, 40, 2), (2, 20, 2), (3, 7, 2)])
    assert run("q4", auction=lots, bid=events) == [
        (*win(0), 2, 7.0),
        (*win(2), 1, 40.0),  # auction 1 alone
        (*win(2), 2, 7.0),
        (*win(4), 1, 30.0),  # (40 + 20) / 2
        (*win(4), 2, 7.0),
        (*win(6), 1, 30.0),
        (*win(6), 2, 7.0),
        (*win(8), 1, 30.0),
        (*win(8), 2, 7.0),
        (*win(10), 1, 30.0),
        (*win(12), 1, 20.0),  # auction 2 alone
    ]


def test_q4_average_is_a_double_of_the_winners() -> None:
    lots = auctions([{"id": i, "seller": 1, "t": 1, "expires": 10, "category": 7} for i in (1, 2, 3)])
    events = bids([(1, 1, 2), (2, 2, 2), (3, 2, 2), (3, 1, 3)])  # winners 1, 2, 2
    assert run("q4", auction=lots, bid=events) == [(*win(s), 7, 5 / 3) for s in (2, 4, 6, 8, 10)]


def test_q4_honours_size_and_slide() -> None:
    params = QueryParams(window_size_s=6, window_slide_s=3)
    lots = auctions(
        [
            {"id": 1, "seller": 1, "category": 1, "t": 1, "expires": 7},  # 1 < s <= 7: windows 3, 6
            {"id": 2, "seller": 1, "category": 1, "t": 1, "expires": 9},  # 3 < s <= 9: windows 6, 9
        ]
    )
    events = bids([(1, 10, 2), (2, 20, 2)])
    assert run("q4", params, auction=lots, bid=events) == [
        (*win(3, 6), 1, 10.0),
        (*win(6, 6), 1, 15.0),
        (*win(9, 6), 1, 20.0),
    ]


# --- Q5 -----------------------------------------------------------------------------------------


def test_q5_sliding_membership_and_ties() -> None:
    events = bids([(1, 1, 0.5), (1, 1, 1.0), (2, 1, 1.5), (2, 1, 9.0), (3, 1, 11.0)])
    expected = [(*win(s), 1, 2) for s in (-8, -6, -4, -2)]  # bids at 0.5, 1.0, 1.5 only
    expected += [(*win(0), 1, 2), (*win(0), 2, 2)]  # tie 2-2 in [0, 10)
    expected += [(*win(s), a, 1) for s in (2, 4, 6, 8) for a in (2, 3)]  # tie 1-1 (bids at 9 and 11)
    expected += [(*win(10), 3, 1)]
    assert run("q5", bid=events) == sorted(expected)


def test_q5_bid_on_a_window_boundary_belongs_to_windows_starting_at_or_before_it() -> None:
    # t = 10 is in [s, s + 10) for s in 2, 4, 6, 8, 10 but not in [0, 10).
    assert run("q5", bid=bids([(7, 1, 10.0)])) == [(*win(s), 7, 1) for s in (2, 4, 6, 8, 10)]
    # one microsecond earlier it is in [0, 10) and not in [10, 20).
    assert run("q5", bid=bids([(7, 1, 9.999999)])) == [(*win(s), 7, 1) for s in (0, 2, 4, 6, 8)]


def test_q5_honours_size_and_slide() -> None:
    params = QueryParams(window_size_s=6, window_slide_s=3)
    events = bids([(1, 1, 4.0), (2, 1, 7.0), (2, 1, 8.0)])
    # t=4 -> starts 0, 3; t=7 and t=8 -> starts 3, 6
    assert run("q5", params, bid=events) == [(*win(0, 6), 1, 1), (*win(3, 6), 2, 2), (*win(6, 6), 2, 2)]


def test_q5_membership_does_not_rely_on_the_size_being_a_multiple_of_the_slide() -> None:
    # QueryParams rejects W % P != 0, but the SQL must not silently depend on that check:
    # with W = 5, P = 2 an event at t = 4 is in the windows starting at 0, 2 and 4.
    params = SimpleNamespace(window_size_s=5, window_slide_s=2)
    assert run("q5", params, bid=bids([(1, 1, 4.0)])) == [(*win(s, 5), 1, 1) for s in (0, 2, 4)]


def test_windows_are_aligned_to_the_unix_epoch_even_before_1970() -> None:
    before_epoch = -(T0 - dt.datetime(1970, 1, 1, tzinfo=UTC)).total_seconds()  # seconds from T0
    events = bids([(1, 5, before_epoch - 0.000001), (1, 5, before_epoch + 3)])
    rows = run("q7", bid=events)
    epoch = dt.datetime(1970, 1, 1, tzinfo=UTC)
    assert [(r[0], r[1]) for r in rows] == [
        (epoch - dt.timedelta(seconds=10), epoch),
        (epoch, epoch + dt.timedelta(seconds=10)),
    ]


# --- Q6 -----------------------------------------------------------------------------------------
#
# One row per auction with a winner: (seller, auction, avg_price), the average winning price over the
# seller's winners of auctions closed at or before this one's close (itself included), keeping the 10
# latest by winning-bid time, then auction id, descending.


def test_q6_one_row_per_auction_with_a_winning_bid() -> None:
    lots, events, winners = _winning_bid_rules()
    # Each auction is its seller's only one, so each row averages its own winning price alone.
    assert run("q6", auction=lots, bid=events) == [(a, a, float(price)) for a, price in winners.items()]


_WINDOW_PARAMS = [DEFAULT_PARAMS, QueryParams(window_size_s=6, window_slide_s=3)]


@pytest.mark.parametrize("params", _WINDOW_PARAMS, ids=str)
def test_q6_averages_the_sellers_winners_closed_at_or_before_the_close(params: QueryParams) -> None:
    # Q6 has no windows: the window parameters change nothing.
    lots = auctions(
        [
            {"id": 1, "seller": 1, "t": 0, "expires": 10},
            {"id": 2, "seller": 1, "t": 0, "expires": 20},
            {"id": 3, "seller": 1, "t": 0, "expires": 20},  # closes with auction 2: each sees the other
            {"id": 4, "seller": 1, "t": 0, "expires": 15, "reserve": 1000},  # no winner: no row, no slot
            {"id": 5, "seller": 1, "t": 0, "expires": 30},
            {"id": 6, "seller": 2, "t": 0, "expires": 5},  # another seller: never mixed in
        ]
    )
    events = bids([(1, 100, 2), (2, 50, 3), (3, 30, 4), (4, 999, 5), (5, 20, 6), (6, 1000, 1)])
    assert run("q6", params, auction=lots, bid=events) == [
        (1, 1, 100.0),  # at 10 s only auction 1 has closed
        (1, 2, 60.0),  # at 20 s: auctions 1, 2 and 3, (100 + 50 + 30) / 3
        (1, 3, 60.0),
        (1, 5, 50.0),  # at 30 s: auctions 1, 2, 3 and 5, (100 + 50 + 30 + 20) / 4
        (2, 6, 1000.0),
    ]


def test_q6_keeps_the_ten_latest_winning_bids_and_a_price_tie_goes_to_the_earliest_bid() -> None:
    # Seller 7: auctions 101..110 close at 50 s, auction 101 + k won with price 10 * (k + 1) at 11 + k s.
    # Auction 111 closes at 40 s; it has two bids at its top price 1000, at 10.5 s and 25 s: the
    # earliest, 10.5 s, is its winning bid, the oldest of all eleven. So at 50 s the ten latest winning
    # bids are those of 101..110 and 111 is left out. (Had the 25 s bid won, or were the ten latest
    # chosen by close time, 101 would be left out instead, giving (20 + ... + 100 + 1000) / 10 = 154.)
    # Auction 101 closes first, at 35 s.
    rows = [{"id": 101 + k, "seller": 7, "t": 0, "expires": 50} for k in range(10)]
    rows[0]["expires"] = 35
    rows.append({"id": 111, "seller": 7, "t": 0, "expires": 40})
    events = bids([(101 + k, 10 * (k + 1), 11 + k) for k in range(10)] + [(111, 1000, 10.5), (111, 1000, 25)])
    assert run("q6", auction=auctions(rows), bid=events) == [
        (7, 101, 10.0),  # at 35 s only itself
        *[(7, a, 55.0) for a in range(102, 111)],  # at 50 s: 101..110, (10 + 20 + ... + 100) / 10
        (7, 111, 505.0),  # at 40 s: 101 and 111, (10 + 1000) / 2
    ]


def test_q6_winning_bid_time_ties_go_to_the_higher_auction_id() -> None:
    # Eleven winners of seller 8, all won at 5 s and closing together at 10 s: the ten latest by
    # (bid time, auction id) descending are auctions 2..11, so every row is (20 + ... + 110) / 10.
    lots = auctions([{"id": i, "seller": 8, "t": 0, "expires": 10} for i in range(1, 12)])
    events = bids([(i, 10 * i, 5) for i in range(1, 12)])
    assert run("q6", auction=lots, bid=events) == [(8, i, 65.0) for i in range(1, 12)]


# --- Q7 -----------------------------------------------------------------------------------------


def test_q7_keeps_every_bid_at_the_window_maximum() -> None:
    events = bids([(1, 5, 0.0), (1, 9, 1.0), (2, 9, 9.999999), (3, 3, 5.0), (4, 9, 10.0), (5, 1, 12.0)])
    assert run("q7", bid=events) == [
        (*win(0), 1, 2, 9, at(1.0), "e1"),
        (*win(0), 2, 3, 9, at(9.999999), "e2"),
        (*win(10), 4, 5, 9, at(10.0), "e4"),
    ]


def test_q7_identical_bids_at_the_maximum_are_all_kept() -> None:
    table = bids([(1, 9, 1.0)])
    doubled = pa.concat_tables([table, table])
    assert run("q7", bid=doubled) == [(*win(0), 1, 1, 9, at(1.0), "e0")] * 2


# --- Q8 -----------------------------------------------------------------------------------------


def test_q8_one_row_per_person_who_opened_an_auction_in_the_window_they_registered() -> None:
    people = persons(
        [
            (1, "ann", "OR", 1),  # two auctions in [0, 10): one row
            (2, "bob", "WA", 9),  # auction at 11 is in the next window: no row
            (3, "cat", "CA", 12),  # auction at 19.999999 is in [10, 20): row
            (4, "dan", "ID", 2),  # no auction: no row
            (5, "eve", "NY", 5),  # auction at 1 is before registering but in the same window: row
        ]
    )
    lots = auctions(
        [
            {"id": 10, "seller": 1, "t": 2},
            {"id": 11, "seller": 1, "t": 3},
            {"id": 12, "seller": 2, "t": 11},
            {"id": 13, "seller": 3, "t": 19.999999},
            {"id": 14, "seller": 5, "t": 1},
            {"id": 15, "seller": 99, "t": 1},
            {"id": 16, "seller": 3, "t": 25},
        ]
    )
    assert run("q8", person=people, auction=lots) == [
        (*win(0), 1, "ann"),
        (*win(0), 5, "eve"),
        (*win(10), 3, "cat"),
    ]


# --- writing ------------------------------------------------------------------------------------


def test_write_reference_writes_one_part_file_and_a_summary(tmp_path, monkeypatch) -> None:
    import core.nexmark.reference as reference

    tables = {
        "person": persons([(1, "ann", "OR", 0)]),
        "auction": auctions([]),
        "bid": bids([(123, 5, 0), (1, 2, 0)]),
    }
    monkeypatch.setattr(reference, "generate_tables", lambda config: tables)
    summary = reference.write_reference("q2", object(), QueryParams(), tmp_path / "out")
    written = pq.read_table(tmp_path / "out" / "part-00000.parquet")
    assert written.schema.remove_metadata() == OUTPUT_SCHEMAS["q2"]
    assert written.to_pylist() == [{"auction": 123, "price": 5}]
    on_disk = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert on_disk == summary
    assert set(on_disk) == {"query", "records_in", "records_out", "wall_s"}
    assert (on_disk["query"], on_disk["records_in"], on_disk["records_out"]) == ("q2", 3, 1)
    assert isinstance(on_disk["wall_s"], float) and on_disk["wall_s"] >= 0  # measured, so not compared


def test_q8_duplicate_person_events_still_give_one_row_per_window() -> None:
    # The same person event twice (e.g. a replayed range) and a re-registration in the next window.
    people = persons([(1, "ann", "OR", 1), (1, "ann", "OR", 1), (1, "ann", "OR", 11)])
    lots = auctions(
        [{"id": 10, "seller": 1, "t": 2}, {"id": 11, "seller": 1, "t": 3}, {"id": 12, "seller": 1, "t": 14}]
    )
    assert run("q8", person=people, auction=lots) == [(*win(0), 1, "ann"), (*win(10), 1, "ann")]


# --- generated events against a pure-Python oracle ----------------------------------------------
#
# The hand-made cases above pin the rules; this pins them on realistic data (hot auctions, auctions
# spanning windows, many ties) by recomputing every query with plain dicts and loops, a third
# implementation that shares nothing with the SQL.


def _plain(table: pa.Table) -> list[dict[str, Any]]:
    """Rows with every timestamp as integer epoch microseconds, for integer window arithmetic."""
    cols = {
        name: (col.cast(pa.int64()) if pa.types.is_timestamp(col.type) else col)
        for name, col in zip(table.column_names, table.columns, strict=True)
    }
    return pa.table(cols).to_pylist()


def _oracle(query: str, tables: dict[str, pa.Table], w: int, p: int) -> pa.Table:
    """docs/queries.md, literally, in Python; w and p in microseconds. Returns the documented schema."""
    from collections import defaultdict

    person, auction, bid = (_plain(tables[e]) for e in ("person", "auction", "bid"))
    out: list[dict[str, Any]] = []

    def window(ws: int) -> dict[str, int]:
        return {"window_start": ws, "window_end": ws + w}

    def winners() -> list[tuple[dict[str, Any], dict[str, Any]]]:
        """(auction, its winning bid): the highest price among its bids with open <= bid time <
        expires and price >= reserve, the earliest bid on a price tie; auctions without one left out."""
        by_auction = defaultdict(list)
        for b in bid:
            by_auction[b["auction"]].append(b)
        found = []
        for a in auction:
            best = None
            for b in by_auction[a["id"]]:
                if not (a["date_time"] <= b["date_time"] < a["expires"] and b["price"] >= a["reserve"]):
                    continue
                if (
                    best is None
                    or b["price"] > best["price"]
                    or (b["price"] == best["price"] and b["date_time"] < best["date_time"])
                ):
                    best = b
            if best is not None:
                found.append((a, best))
        return found

    if query == "q0":
        out = [
            {k: b[k] for k in ("auction", "bidder", "price", "channel", "url", "date_time", "extra")}
            for b in bid
        ]
    elif query == "q1":
        out = [
            {**{k: b[k] for k in ("auction", "bidder", "date_time")}, "price": float(b["price"]) * 0.908}
            for b in bid
        ]
    elif query == "q2":
        out = [{"auction": b["auction"], "price": b["price"]} for b in bid if b["auction"] % 123 == 0]
    elif query == "q3":
        local = {x["id"]: x for x in person if x["state"] in ("OR", "ID", "CA")}
        out = [
            {"name": local[a["seller"]]["name"], "city": local[a["seller"]]["city"],
             "state": local[a["seller"]]["state"], "id": a["id"]}
            for a in auction
            if a["category"] == 10 and a["seller"] in local
        ]  # fmt: skip
    elif query == "q4":
        prices: dict[tuple[int, int], list[int]] = defaultdict(list)
        for a, b in winners():
            t = a["expires"]  # the close instant is in every window [s, s + W), s = k * P, t - W < s <= t
            ws = t // p * p
            while ws > t - w:
                prices[(ws, a["category"])].append(b["price"])
                ws -= p
        for (ws, category), won in prices.items():
            out.append({**window(ws), "category": category, "avg_price": sum(won) / len(won)})
    elif query == "q6":
        won_by_seller = defaultdict(list)
        for a, b in winners():
            won_by_seller[a["seller"]].append((a, b))
        for won in won_by_seller.values():
            for a, _ in won:
                closed = [
                    (other_b["date_time"], other_a["id"], other_b["price"])
                    for other_a, other_b in won
                    if other_a["expires"] <= a["expires"]
                ]
                latest = sorted(closed, reverse=True)[:10]
                avg = sum(price for _, _, price in latest) / len(latest)
                out.append({"seller": a["seller"], "auction": a["id"], "avg_price": avg})
    elif query == "q5":
        counts: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
        for b in bid:
            t = b["date_time"]
            ws = t // p * p
            while ws > t - w:
                counts[ws][b["auction"]] += 1
                ws -= p
        for ws, per_auction in counts.items():
            top = max(per_auction.values())
            out += [{**window(ws), "auction": a, "num_bids": n} for a, n in per_auction.items() if n == top]
    elif query == "q7":
        top: dict[int, int] = {}
        for b in bid:
            ws = b["date_time"] // w * w
            top[ws] = max(top.get(ws, b["price"]), b["price"])
        out = [
            {
                **window(b["date_time"] // w * w),
                **{k: b[k] for k in ("auction", "bidder", "price", "date_time", "extra")},
            }
            for b in bid
            if b["price"] == top[b["date_time"] // w * w]
        ]
    elif query == "q8":
        opened = {(a["date_time"] // w * w, a["seller"]) for a in auction}
        rows = {
            (x["date_time"] // w * w, x["id"], x["name"])
            for x in person
            if (x["date_time"] // w * w, x["id"]) in opened
        }
        out = [{**window(ws), "id": i, "name": n} for ws, i, n in rows]
    schema = OUTPUT_SCHEMAS[query]
    plain_schema = pa.schema(
        [pa.field(f.name, pa.int64() if pa.types.is_timestamp(f.type) else f.type) for f in schema]
    )
    return pa.Table.from_pylist(out, schema=plain_schema).cast(schema)


@pytest.fixture(scope="module")
def generated() -> dict[str, pa.Table]:
    pytest.importorskip("core.nexmark.generator")
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.reference import generate_tables
    from core.nexmark.schedule import RateSchedule

    # 1,000 events/s for 40 s: four tumbling windows and about twenty sliding ones.
    return generate_tables(GeneratorConfig(seed=7, events=40_000, schedule=RateSchedule.constant(1_000)))


@pytest.mark.parametrize("params", [QueryParams(), QueryParams(window_size_s=6, window_slide_s=3)], ids=str)
@pytest.mark.parametrize("query", QUERIES)
def test_reference_matches_a_python_oracle_on_generated_events(
    query: str, params: QueryParams, generated: dict[str, pa.Table]
) -> None:
    from core.results import diff_results

    result = compute_reference(query, generated, params)
    expected = _oracle(query, generated, params.window_size_s * 1_000_000, params.window_slide_s * 1_000_000)
    assert expected.num_rows > 0, "the generated events should exercise every query"
    assert diff_results(result, expected) is None, diff_results(result, expected)


def test_reference_for_and_write_reference_on_generated_events(tmp_path) -> None:
    pytest.importorskip("core.nexmark.generator")
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.reference import reference_for, write_reference
    from core.results import diff_results, read_results

    config = GeneratorConfig(seed=3, events=30_000)
    expected = reference_for("q7", config, QueryParams())
    summary = write_reference("q7", config, QueryParams(), tmp_path)
    assert summary["records_in"] == 30_000 and summary["records_out"] == expected.num_rows > 0
    assert diff_results(read_results(tmp_path), expected) is None

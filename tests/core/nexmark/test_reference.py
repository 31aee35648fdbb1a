"""Known-answer tests for the DuckDB reference of NEXMark Q0-Q8 (docs/queries.md).

Every expected result here is worked out by hand from the doc, not computed, so the reference is
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
        "q6": [*wnd, ("seller", i64), ("avg_price", f64)],
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


# --- Q4 -----------------------------------------------------------------------------------------


def test_q4_winning_bids_respect_reserve_expires_and_window() -> None:
    lots = auctions(
        [
            # category 1, window [0, 10): winner 150 (200 is after expiry, 90 below reserve)
            {"id": 1, "seller": 1, "t": 1, "expires": 5, "reserve": 100, "category": 1},
            # category 1, window [0, 10): winner 50; the 500 bid falls in the next window
            {"id": 2, "seller": 1, "t": 8, "expires": 30, "reserve": 10, "category": 1},
            # category 2: a bid exactly at expires counts, one microsecond later does not
            {"id": 3, "seller": 2, "t": 1, "expires": 3, "reserve": 10, "category": 2},
            # category 2: a price exactly at the reserve counts
            {"id": 4, "seller": 2, "t": 2, "expires": 9, "reserve": 70, "category": 2},
            # category 3: no qualifying bid, so no winning bid and no row for category 3
            {"id": 5, "seller": 3, "t": 2, "expires": 9, "reserve": 1000, "category": 3},
            # category 1 again, window [10, 20)
            {"id": 6, "seller": 1, "t": 10, "expires": 100, "reserve": 0, "category": 1},
            # an auction without any bid
            {"id": 7, "seller": 1, "t": 3, "category": 4},
        ]
    )
    events = bids(
        [
            (1, 150, 2),
            (1, 200, 6),
            (1, 90, 3),
            (1, 120, 4),
            (2, 50, 9),
            (2, 500, 11),
            (3, 40, 3),
            (3, 60, 3.000001),
            (4, 70, 5),
            (4, 69, 6),
            (5, 999, 4),
            (6, 33, 15),
            (6, 31, 19.999999),
            (6, 1000, 20),  # window [20, 30): not the auction's window
            (99, 5000, 1),  # bid for an unknown auction
        ]
    )
    assert run("q4", auction=lots, bid=events) == [
        (*win(0), 1, 100.0),  # (150 + 50) / 2
        (*win(0), 2, 55.0),  # (40 + 70) / 2
        (*win(10), 1, 33.0),
    ]


def test_q4_average_is_a_double_of_the_winners() -> None:
    lots = auctions([{"id": i, "seller": 1, "t": 1, "category": 7} for i in (1, 2, 3)])
    events = bids([(1, 1, 2), (2, 2, 2), (3, 2, 2), (3, 1, 3)])
    assert run("q4", auction=lots, bid=events) == [(*win(0), 7, 5 / 3)]


def test_q4_bid_before_the_auction_opened_in_the_same_window_counts() -> None:
    # docs/queries.md only requires the same window and date_time <= expires, not date_time >= opening.
    lots = auctions([{"id": 1, "seller": 1, "t": 5, "expires": 9, "category": 1}])
    assert run("q4", auction=lots, bid=bids([(1, 42, 0.5)])) == [(*win(0), 1, 42.0)]


def test_q4_honours_window_size() -> None:
    lots = auctions([{"id": 1, "seller": 1, "t": 1, "category": 1}])
    events = bids([(1, 10, 2), (1, 20, 4.5)])
    assert run("q4", QueryParams(window_size_s=4, window_slide_s=2), auction=lots, bid=events) == [
        (*win(0, 4), 1, 10.0)
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


def test_q6_averages_the_ten_most_recent_auctions_with_a_winning_bid() -> None:
    # Seller 7: twelve auctions in [0, 10); id 101 + k opens at (11 - k) * 0.5 s, so the ten most
    # recent are ids 101..110 (not 111, 112) even though ids grow the other way. Auction 200 is the
    # most recent of all but has no winning bid (below reserve), so it does not take a slot.
    rows = [{"id": 101 + k, "seller": 7, "t": (11 - k) * 0.5} for k in range(12)]
    rows.append({"id": 200, "seller": 7, "t": 9, "reserve": 10_000})
    # Seller 9: one auction in [0, 10) whose best bid is after expiry, its valid max is 8.
    rows.append({"id": 300, "seller": 9, "t": 1, "expires": 4})
    # Seller 9 in [10, 20): a single auction.
    rows.append({"id": 301, "seller": 9, "t": 12})
    lots = auctions(rows)
    events = bids(
        [(101 + k, 10 * (k + 1), 9.5) for k in range(12)]
        + [(200, 9_999, 9.6), (300, 5, 2), (300, 8, 3), (300, 100, 5), (301, 44, 13)]
    )
    assert run("q6", auction=lots, bid=events) == [
        (*win(0), 7, sum(10 * (k + 1) for k in range(10)) / 10),  # 55.0
        (*win(0), 9, 8.0),
        (*win(10), 9, 44.0),
    ]


def test_q6_breaks_opening_time_ties_by_auction_id_descending() -> None:
    # Eleven auctions of seller 8 opened at the same instant: the ten with the highest ids count.
    lots = auctions([{"id": i, "seller": 8, "t": 1} for i in range(1, 12)])
    events = bids([(i, 10 * i, 2) for i in range(1, 12)])
    assert run("q6", auction=lots, bid=events) == [(*win(0), 8, sum(10 * i for i in range(2, 12)) / 10)]


def test_q6_counts_auctions_per_window_separately() -> None:
    # Twelve auctions in [0, 10) and one in [10, 20): the later one does not push out earlier ones.
    lots = auctions(
        [{"id": i, "seller": 1, "t": i * 0.5} for i in range(1, 13)] + [{"id": 50, "seller": 1, "t": 15}]
    )
    events = bids([(i, i, 9.9) for i in range(1, 13)] + [(50, 1000, 16)])
    assert run("q6", auction=lots, bid=events) == [
        (*win(0), 1, sum(range(3, 13)) / 10),
        (*win(10), 1, 1000.0),
    ]


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

    def winners() -> list[tuple[int, dict[str, Any], int]]:
        by_auction = defaultdict(list)
        for b in bid:
            by_auction[b["auction"]].append(b)
        found = []
        for a in auction:
            ws = a["date_time"] // w * w
            prices = [
                b["price"]
                for b in by_auction[a["id"]]
                if b["date_time"] // w * w == ws
                and b["date_time"] <= a["expires"]
                and b["price"] >= a["reserve"]
            ]
            if prices:
                found.append((ws, a, max(prices)))
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
    elif query in ("q4", "q6"):
        groups = defaultdict(list)
        for ws, a, price in winners():
            groups[(ws, a["category"] if query == "q4" else a["seller"])].append(
                (a["date_time"], a["id"], price)
            )
        for (ws, key), entries in groups.items():
            if query == "q6":
                entries = sorted(entries, reverse=True)[:10]
            name = "category" if query == "q4" else "seller"
            out.append({**window(ws), name: key, "avg_price": sum(e[2] for e in entries) / len(entries)})
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

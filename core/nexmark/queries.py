"""NEXMark Q0-Q8 in our query API; docs/queries.md states what each computes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from core.errors import ConfigError
from core.expr import DType, col
from core.nexmark.params import QueryParams
from core.plan import LogicalPlan, WindowSpec
from core.query import QueryBuilder, Stream, agg


def entity_columns(entity: str) -> dict[str, DType]:
    """Our column types for an entity, read off the generator's Arrow schema."""
    from core.arrow_types import to_dtype
    from core.nexmark.schema import schema_for

    return {f.name: to_dtype(f.type) for f in schema_for(entity)}


def _bids(q: QueryBuilder) -> Stream:
    return q.source("bid", entity_columns("bid"))


def q0(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q0")
    bids = _bids(q)
    bids.map(**{c: col(c) for c in bids.schema}).sink()
    return q


def q1(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q1")
    _bids(q).map(
        auction=col("auction"), bidder=col("bidder"), price=col("price") * 0.908, date_time=col("date_time")
    ).sink()
    return q


def q2(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q2")
    _bids(q).filter((col("auction") % 123).eq(0)).map(auction=col("auction"), price=col("price")).sink()
    return q


def q3(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q3")
    persons = (
        q.source("person", entity_columns("person"))
        .filter(col("state").isin("OR", "ID", "CA"))
        .map(p_id=col("id"), name=col("name"), city=col("city"), state=col("state"))
        .key_by("p_id")
    )
    auctions = (
        q.source("auction", entity_columns("auction"))
        .filter(col("category").eq(10))
        .map(id=col("id"), seller=col("seller"))
        .key_by("seller")
    )
    persons.join(auctions).map(name=col("name"), city=col("city"), state=col("state"), id=col("id")).sink()
    return q


def _winning_bids(q: QueryBuilder) -> Stream:
    """Q4/Q6: each auction's winning bid, decided at its close (NEXMark's WinningBids, as Beam): the
    highest bid at or above the reserve with open <= bid time < expires, the earliest on a tie."""
    auctions = (
        q.source("auction", entity_columns("auction"))
        .map(
            a_id=col("id"),
            seller=col("seller"),
            category=col("category"),
            reserve=col("reserve"),
            a_date_time=col("date_time"),
            expires=col("expires"),
        )
        .key_by("a_id")
    )
    bids = (
        _bids(q)
        .map(b_auction=col("auction"), price=col("price"), b_date_time=col("date_time"))
        .key_by("b_auction")
    )
    return auctions.winner_at_close(
        bids,
        opens="a_date_time",
        closes="expires",
        at="b_date_time",
        by="price",
        condition=col("price") >= col("reserve"),
    )


def q4(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q4")
    closed = WindowSpec(p.window_size_s, p.window_slide_s, on="expires")
    _winning_bids(q).key_by("category").window_aggregate(closed, avg_price=agg("avg", col("price"))).sink()
    return q


def q5(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q5")
    window = WindowSpec(p.window_size_s, p.window_slide_s)
    counts = _bids(q).map(auction=col("auction"), date_time=col("date_time")).key_by("auction")
    counts.window_aggregate(window, num_bids=agg("count")).key_by().top_k(1, "num_bids").sink()
    return q


def q6(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q6")
    _winning_bids(q).key_by("seller").latest_aggregate(
        10,
        order_by=("b_date_time", "a_id"),
        at="expires",
        carry=("a_id",),
        avg_price=agg("avg", col("price")),
    ).map(seller=col("seller"), auction=col("a_id"), avg_price=col("avg_price")).sink()
    return q


def q7(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q7")
    window = WindowSpec(p.window_size_s, p.window_size_s)
    fields = ("auction", "bidder", "price", "date_time", "extra")
    _bids(q).key_by().window_aggregate(
        window, top=agg("max_with_ties", col("price"), fields=fields)
    ).flat_map("top").sink()
    return q


def q8(p: QueryParams) -> QueryBuilder:
    q = QueryBuilder("q8")
    window = WindowSpec(p.window_size_s, p.window_size_s)
    persons = (
        q.source("person", entity_columns("person"))
        .map(id=col("id"), name=col("name"), date_time=col("date_time"))
        .key_by("id")
    )
    auctions = (
        q.source("auction", entity_columns("auction"))
        .map(seller=col("seller"), a_date_time=col("date_time"))
        .key_by("seller")
    )
    joined = persons.join(auctions, window=window, right_on="a_date_time")
    joined.key_by("window", "id", "name").window_aggregate(None, auctions=agg("count")).map(
        window=col("window"), id=col("id"), name=col("name")
    ).sink()
    return q


@dataclass(frozen=True)
class QueryInfo:
    name: str
    summary: str
    build: Callable[[QueryParams], QueryBuilder]

    def plan(self, params: QueryParams | None = None) -> LogicalPlan:
        return self.build(params or QueryParams()).build()


QUERIES: dict[str, QueryInfo] = {
    i.name: i
    for i in (
        QueryInfo("q0", "pass-through: every bid, unchanged (stateless)", q0),
        QueryInfo("q1", "currency conversion: bid prices in euros (stateless map)", q1),
        QueryInfo("q2", "selection: bids on auctions whose id is a multiple of 123 (stateless filter)", q2),
        QueryInfo("q3", "local item suggestion: sellers in OR/ID/CA with category-10 auctions (join)", q3),
        QueryInfo("q4", "average winning price per category, per sliding window of close time", q4),
        QueryInfo("q5", "hot items: auctions with the most bids per sliding window (count + top-1)", q5),
        QueryInfo("q6", "per closed auction, its seller's average over their last 10 winning bids", q6),
        QueryInfo("q7", "highest bid(s) per tumbling window (max with its records, ties kept)", q7),
        QueryInfo("q8", "new users who opened an auction in the window they registered (windowed join)", q8),
    )
}


def get_query(name: str) -> QueryInfo:
    key = name.lower()
    if key not in QUERIES:
        raise ConfigError(
            f"unknown query {name!r}", hint=f"choose one of {', '.join(QUERIES)} (sponge queries)"
        )
    return QUERIES[key]

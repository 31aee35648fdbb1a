"""NEXMark Q0-Q8 written by hand in native PySpark Structured Streaming: the bench's baseline (c).

This is "what a Spark expert would write" for each query of docs/queries.md, straight from that text
and independent of our query API and of `core/spark/lower.py`: no proxies, no panes, Spark's own
window() for sliding windows, one aggregation wherever one suffices. Only the source DataFrames are
shared with our plans (`core.spark.streams.nexmark_sources`: watermark on date_time plus the
end-of-stream punctuation), so that the source cost is identical in every variant of the bench.

Every function takes `source(entity) -> DataFrame` and the window parameters and returns the
streaming DataFrame whose columns are exactly the query's output columns of docs/queries.md.

Event-time columns: Spark allows one event-time column per input of a stateful operator, and a
window() over the watermarked `date_time` is itself an event-time column. So a query keeps the window
as its event time and turns any other timestamp it still needs into plain epoch microseconds
(`unix_micros`), compared as integers and turned back into a timestamp only where it is output.
"""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from core.nexmark.params import QueryParams

SourceFn = Callable[[str], DataFrame]
NativeQuery = Callable[[SourceFn, QueryParams], DataFrame]


def _tumbling(column: str, p: QueryParams) -> Column:
    return F.window(F.col(column), f"{p.window_size_s} seconds")


def _flat_window(df: DataFrame, *rest: str | Column) -> DataFrame:
    start, end = F.col("window.start").alias("window_start"), F.col("window.end").alias("window_end")
    return df.select(start, end, *rest)


def q0(source: SourceFn, p: QueryParams) -> DataFrame:
    return source("bid").select("auction", "bidder", "price", "channel", "url", "date_time", "extra")


def q1(source: SourceFn, p: QueryParams) -> DataFrame:
    return source("bid").select(
        "auction", "bidder", (F.col("price").cast("double") * F.lit(0.908)).alias("price"), "date_time"
    )


def q2(source: SourceFn, p: QueryParams) -> DataFrame:
    return source("bid").where(F.col("auction") % 123 == 0).select("auction", "price")


def q3(source: SourceFn, p: QueryParams) -> DataFrame:
    # An unwindowed incremental join: neither side keeps an event-time column, state is kept forever.
    persons = (
        source("person")
        .where(F.col("state").isin("OR", "ID", "CA"))
        .select(F.col("id").alias("p_id"), "name", "city", "state")
    )
    auctions = source("auction").where(F.col("category") == 10).select("id", "seller")
    return persons.join(auctions, F.col("p_id") == F.col("seller")).select("name", "city", "state", "id")


def _winning_bids(source: SourceFn, p: QueryParams) -> DataFrame:
    """Q4/Q6: per auction and its window, the highest bid of that window at or above the reserve and
    not after expiry. Columns: window, a_id, seller, category, a_us (auction time, epoch us), final."""
    auctions = source("auction").select(
        _tumbling("date_time", p).alias("window"),
        F.col("id").alias("a_id"),
        "seller",
        "category",
        "reserve",
        F.unix_micros("expires").alias("expires_us"),
        F.unix_micros("date_time").alias("a_us"),
    )
    bids = source("bid").select(
        _tumbling("date_time", p).alias("b_window"),
        F.col("auction").alias("b_auction"),
        F.col("price").alias("b_price"),
        F.unix_micros("date_time").alias("b_us"),
    )
    joined = auctions.join(
        bids,
        (F.col("a_id") == F.col("b_auction"))
        & (F.col("window") == F.col("b_window"))
        & (F.col("b_us") <= F.col("expires_us"))
        & (F.col("b_price") >= F.col("reserve")),
    )
    return joined.groupBy("window", "a_id", "seller", "category", "a_us").agg(F.max("b_price").alias("final"))


def q4(source: SourceFn, p: QueryParams) -> DataFrame:
    avg = _winning_bids(source, p).groupBy("window", "category").agg(F.avg("final").alias("avg_price"))
    return _flat_window(avg, "category", "avg_price")


def q5(source: SourceFn, p: QueryParams) -> DataFrame:
    window = F.window(F.col("date_time"), f"{p.window_size_s} seconds", f"{p.window_slide_s} seconds")
    counts = source("bid").groupBy(window.alias("window"), "auction").agg(F.count(F.lit(1)).alias("num_bids"))
    top = counts.groupBy("window").agg(
        F.max("num_bids").alias("top"), F.collect_list(F.struct("auction", "num_bids")).alias("rows")
    )
    tied = F.filter("rows", lambda r: r["num_bids"] == F.col("top"))
    hot = top.select("window", F.explode(tied).alias("r"))
    return _flat_window(hot, "r.auction", "r.num_bids")


def q6(source: SourceFn, p: QueryParams) -> DataFrame:
    # The 10 most recent auctions by (auction time, id) descending: sort the collected structs.
    latest_first = F.sort_array(F.collect_list(F.struct("a_us", "a_id", "final")), asc=False)
    winning = _winning_bids(source, p)
    recent = winning.groupBy("window", "seller").agg(F.slice(latest_first, 1, 10).alias("top"))
    total = F.aggregate("top", F.lit(0.0), lambda acc, r: acc + r["final"].cast("double"))
    return _flat_window(recent, "seller", (total / F.size("top")).alias("avg_price"))


def q7(source: SourceFn, p: QueryParams) -> DataFrame:
    per_window = source("bid").groupBy(_tumbling("date_time", p).alias("window")).agg(
        F.max("price").alias("top"),
        F.collect_list(F.struct("auction", "bidder", "price", "date_time", "extra")).alias("rows"),
    )
    best = per_window.select(
        "window", F.explode(F.filter("rows", lambda r: r["price"] == F.col("top"))).alias("r")
    )
    return _flat_window(best, "r.auction", "r.bidder", "r.price", "r.date_time", "r.extra")


def q8(source: SourceFn, p: QueryParams) -> DataFrame:
    persons = source("person").select(_tumbling("date_time", p).alias("window"), "id", "name")
    sellers = source("auction").select(_tumbling("date_time", p).alias("a_window"), "seller")
    joined = persons.join(
        sellers, (F.col("id") == F.col("seller")) & (F.col("window") == F.col("a_window"))
    )
    new_users = joined.groupBy("window", "id", "name").agg(F.count(F.lit(1)).alias("n"))
    return _flat_window(new_users, "id", "name")


NATIVE_QUERIES: dict[str, NativeQuery] = {
    "q0": q0,
    "q1": q1,
    "q2": q2,
    "q3": q3,
    "q4": q4,
    "q5": q5,
    "q6": q6,
    "q7": q7,
    "q8": q8,
}

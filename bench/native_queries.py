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

Q4 and Q6 need each auction's winning bid, known only when the auction closes: no join or
aggregation of Spark says that, so they run the plain per-key transformWithStateInPandas an expert
would write first (one auction per key, a value state and a timer at the close; for Q6 a second one
per seller holding its 10 latest winners). Every query starts on the state store of the run's
configuration, as ours does (RocksDB by default, which transformWithState requires). Timestamps
cross into pandas as int64 epoch microseconds, clear of pandas' zone and precision rules.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator

import numpy as np
import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.streaming.stateful_processor import (
    ExpiredTimerInfo,
    StatefulProcessor,
    StatefulProcessorHandle,
    TimerValues,
)

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


_WINNER = "auction long, seller long, category long, price long, bid_us long, expires timestamp"


def _one_frame(rows: Iterator[pd.DataFrame]) -> pd.DataFrame:
    frames = list(rows)
    return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)


class _WinningBid(StatefulProcessor):
    """Per auction id: the auction and its best valid bid so far in one value state, and a timer at
    its close. Input rows are auctions (is_bid false) and bids of that id, timestamps as epoch us;
    the output is the winner, at the close, as a row of `_WINNER`.

    The timer is at the first whole millisecond at or after `expires` (the watermark is in ms): when
    the watermark reaches it, every bid before `expires` has been seen, since later micro-batches
    only carry events at or after the watermark and the bids of the timer's own micro-batch are
    handled before its timers. The generator never sends a bid before its auction, so a bid that
    finds no auction is for a closed one (or a dropped one) and cannot win."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.handle = handle
        self.auction = handle.getValueState(
            "auction",
            "seller long, category long, reserve long, opens_us long, expires_us long, "
            "price long, bid_us long",
        )

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        df = _one_frame(rows)
        is_bid, t_us, price = (df[c].to_numpy() for c in ("is_bid", "t_us", "price"))
        state = self.auction.get()
        changed = state is None
        if state is None:
            if is_bid.all():
                return
            a = int(is_bid.argmin())  # the auction's row
            expires_us = int(df["expires_us"].iat[a])
            close_ms = -(-expires_us // 1000)
            if close_ms <= timerValues.getCurrentWatermarkInMs():
                return  # closed already: behind the watermark, dropped as Spark drops late rows
            fields = (int(df[c].iat[a]) for c in ("seller", "category", "reserve", "t_us"))
            state = (*fields, expires_us, None, None)
            self.handle.registerTimer(close_ms)
        seller, category, reserve, opens_us, expires_us, best, best_us = state
        valid = is_bid & (t_us >= opens_us) & (t_us < expires_us) & (price >= reserve)
        if valid.any():
            prices, times = price[valid], t_us[valid]
            top = prices.max()
            top_us = times[prices == top].min()
            if best is None or (top, -top_us) > (best, -best_us):
                best, best_us, changed = int(top), int(top_us), True
        if changed:
            self.auction.update((seller, category, reserve, opens_us, expires_us, best, best_us))
        yield from ()

    def handleExpiredTimer(
        self, key: tuple, timerValues: TimerValues, expiredTimerInfo: ExpiredTimerInfo
    ) -> Iterator[pd.DataFrame]:
        seller, category, _, _, expires_us, price, bid_us = self.auction.get()
        self.auction.clear()
        if price is not None:
            # numpy arrays, not lists: a one-row frame per auction, built without type inference
            yield pd.DataFrame(
                {
                    "auction": np.array([key[0]], dtype=np.int64),
                    "seller": np.array([seller], dtype=np.int64),
                    "category": np.array([category], dtype=np.int64),
                    "price": np.array([price], dtype=np.int64),
                    "bid_us": np.array([bid_us], dtype=np.int64),
                    "expires": pd.DatetimeIndex(np.array([expires_us], dtype="datetime64[us]"), tz="UTC"),
                }
            )

    def close(self) -> None:
        pass


def _winning_bids(source: SourceFn) -> DataFrame:
    """Q4/Q6: each auction's winning bid, emitted when the watermark passes its close, with `expires`
    as its event time. Columns: auction, seller, category, price, bid_us (bid time, epoch us), expires.

    Auctions and bids go through one transformWithState keyed by auction id; the other side's
    columns are zeros so that pandas keeps every column int64."""
    zero = F.lit(0).cast("long")
    auctions = source("auction").select(
        F.col("id").alias("auction"),
        F.lit(False).alias("is_bid"),
        "seller",
        "category",
        "reserve",
        F.unix_micros("date_time").alias("t_us"),
        F.unix_micros("expires").alias("expires_us"),
        zero.alias("price"),
    )
    bids = source("bid").select(
        "auction",
        F.lit(True).alias("is_bid"),
        zero.alias("seller"),
        zero.alias("category"),
        zero.alias("reserve"),
        F.unix_micros("date_time").alias("t_us"),
        zero.alias("expires_us"),
        "price",
    )
    return (
        auctions.unionByName(bids)
        .groupBy("auction")
        .transformWithStateInPandas(
            statefulProcessor=_WinningBid(),
            outputStructType=_WINNER,
            outputMode="Append",
            timeMode="EventTime",
            eventTimeColumnName="expires",
        )
    )


def q4(source: SourceFn, p: QueryParams) -> DataFrame:
    window = F.window(F.col("expires"), f"{p.window_size_s} seconds", f"{p.window_slide_s} seconds")
    avg = (
        _winning_bids(source)
        .groupBy(window.alias("window"), "category")
        .agg(F.avg("price").alias("avg_price"))
    )
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


class _LatestWinners(StatefulProcessor):
    """Per seller: its 10 latest winning bids by (bid time, auction id), in a list state. A winner
    reaches it in the micro-batch its auction closes in, so every winner of an earlier micro-batch
    closed before it; within a micro-batch the winners are answered in order of close, those closing
    at the same instant together (each sees the others), then kept."""

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.latest = handle.getListState("latest", "bid_us long, auction long, price long")

    def handleInputRows(
        self, key: tuple, rows: Iterator[pd.DataFrame], timerValues: TimerValues
    ) -> Iterator[pd.DataFrame]:
        df = _one_frame(rows)
        columns = (df[c].tolist() for c in ("expires_us", "bid_us", "auction", "price"))
        won = sorted(zip(*columns, strict=True))  # in order of close
        kept = [tuple(r) for r in self.latest.get()]  # (bid_us, auction, price), latest first
        auctions, averages = [], []
        for _, same_close in itertools.groupby(won, key=lambda w: w[0]):
            closing = [w[1:] for w in same_close]
            kept = sorted(kept + closing, reverse=True)[:10]
            avg = sum(price for _, _, price in kept) / len(kept)
            auctions += [auction for _, auction, _ in closing]
            averages += [avg] * len(closing)
        self.latest.put(kept)
        yield pd.DataFrame(
            {
                "seller": np.full(len(auctions), key[0], dtype=np.int64),
                "auction": np.array(auctions, dtype=np.int64),
                "avg_price": np.array(averages, dtype=np.float64),
            }
        )

    def close(self) -> None:
        pass


def q6(source: SourceFn, p: QueryParams) -> DataFrame:
    winners = _winning_bids(source).select(
        "seller", "auction", "price", "bid_us", F.unix_micros("expires").alias("expires_us")
    )
    return winners.groupBy("seller").transformWithStateInPandas(
        statefulProcessor=_LatestWinners(),
        outputStructType="seller long, auction long, avg_price double",
        outputMode="Append",
        timeMode="None",
    )


def q7(source: SourceFn, p: QueryParams) -> DataFrame:
    per_window = (
        source("bid")
        .groupBy(_tumbling("date_time", p).alias("window"))
        .agg(
            F.max("price").alias("top"),
            F.collect_list(F.struct("auction", "bidder", "price", "date_time", "extra")).alias("rows"),
        )
    )
    best = per_window.select(
        "window", F.explode(F.filter("rows", lambda r: r["price"] == F.col("top"))).alias("r")
    )
    return _flat_window(best, "r.auction", "r.bidder", "r.price", "r.date_time", "r.extra")


def q8(source: SourceFn, p: QueryParams) -> DataFrame:
    persons = source("person").select(_tumbling("date_time", p).alias("window"), "id", "name")
    sellers = source("auction").select(_tumbling("date_time", p).alias("a_window"), "seller")
    joined = persons.join(sellers, (F.col("id") == F.col("seller")) & (F.col("window") == F.col("a_window")))
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

"""Winning bids decided at the auction's close, streamed through Spark over hand-made events.

Each auction below is its own case of NEXMark's rule (a bid after the opening window, at expiry,
before the auction opened, below the reserve, no valid bid, a tie on price). The events are cut into
epochs by event time, so an auction's bids reach the operator in later micro-batches than the auction
itself. The operator's winners are checked against the hand-worked answer, and Q4 and Q6 over the
same streams against the DuckDB reference.
"""

from __future__ import annotations

import itertools
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.pandas.types import from_arrow_schema

from core.expr import col
from core.nexmark.params import QueryParams
from core.nexmark.queries import QUERIES, entity_columns
from core.nexmark.reference import OUTPUT_SCHEMAS, compute_reference
from core.nexmark.schema import END_OF_STREAM_TIME_US
from core.plan import LogicalPlan, Source
from core.query import QueryBuilder
from core.results import diff_results, read_results
from core.spark.lower import lower_plain
from core.spark.streams import keep_alive
from tests.core.nexmark.test_reference import at, auctions, bids
from tests.core.spark.test_lowering_merge_properties import state_store_of

pytestmark = pytest.mark.spark

CUTS_S = (10, 20, 30)  # epoch boundaries, seconds after T0: one file per epoch and entity

AUCTIONS = auctions(
    [
        # a bid after the auction's opening window, before expiry, wins; a higher one at expiry does not
        {"id": 1, "seller": 1, "t": 1, "expires": 25, "reserve": 10},
        # a bid before the auction opened does not count, however high
        {"id": 2, "seller": 2, "t": 5, "expires": 9},
        # only a bid below the reserve: no winner
        {"id": 3, "seller": 3, "t": 2, "expires": 12, "reserve": 100},
        # no bid at all: no winner
        {"id": 4, "seller": 4, "t": 3, "expires": 8},
        # a tie on price: the earliest bid wins
        {"id": 5, "seller": 5, "t": 1, "expires": 30},
        # a price exactly at the reserve counts; the last microsecond before expiry counts
        {"id": 6, "seller": 6, "t": 2, "expires": 40, "reserve": 20},
    ]
)
BIDS = bids(
    [
        (1, 40, 5),
        (1, 50, 14),
        (1, 60, 25),
        (2, 100, 4),
        (2, 30, 6),
        (3, 99, 3),
        (5, 65, 2),
        (5, 70, 3),
        (5, 70, 2.5),
        (6, 20, 35),
        (6, 19, 36),
        (6, 21, 39.999999),
        (99, 1000, 3),  # an auction that never appears
    ]
)
# (auction, winning price, winning bid time)
WINNERS = {(1, 50, at(14)), (2, 30, at(6)), (5, 70, at(2.5)), (6, 21, at(39.999999))}


def _epochs(data: pa.Table) -> list[pa.Table]:
    t = data.column("date_time").cast(pa.int64()).to_pylist()
    bounds = [int(at(s).timestamp() * 1_000_000) for s in CUTS_S]
    edges = [-(2**62), *bounds, 2**62]
    return [data.filter(pa.array([lo <= x < hi for x in t])) for lo, hi in itertools.pairwise(edges)]


def _stream(spark: SparkSession, root: Path, entity: str, data: pa.Table) -> DataFrame:
    """`data` as a file stream of one file per epoch, then the end-of-stream punctuation, watermarked
    as a run's sources are."""
    folder = root / entity
    folder.mkdir()
    punctuation = {f.name: pa.nulls(1, f.type) for f in data.schema}
    punctuation["date_time"] = pa.array([END_OF_STREAM_TIME_US], pa.int64()).cast(
        data.schema.field("date_time").type
    )
    for i, part in enumerate([*_epochs(data), pa.table(punctuation, data.schema)]):
        path = folder / f"epoch{i}.parquet"
        pq.write_table(part, path)
        os.utime(path, (1_000_000 + i, 1_000_000 + i))  # the file source reads by modification time
    reader = spark.readStream.schema(from_arrow_schema(data.schema)).option("maxFilesPerTrigger", 1)
    return keep_alive(reader.parquet(str(folder)), "date_time", heartbeats=False)


def _run(spark: SparkSession, plan: LogicalPlan, root: Path) -> Path:
    """Stream `plan` over AUCTIONS and BIDS to a parquet directory; returns it."""
    tables = {"auction": AUCTIONS, "bid": BIDS}

    def sources(src: Source) -> DataFrame:
        return _stream(spark, root / "in", src.entity, tables[src.entity])

    (root / "in").mkdir(parents=True)
    (df,) = lower_plain(plan, sources).values()
    out = root / "out"
    with state_store_of(spark, plan):
        query = (
            df.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(root / "checkpoint"))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination(180)
        assert not query.isActive, "the stream did not end"
        assert query.exception() is None
        assert len([p for p in query.recentProgress if p["numInputRows"]]) >= len(CUTS_S), "several epochs"
    return out


def _winners_plan() -> LogicalPlan:
    q = QueryBuilder("winners")
    lots = q.source("auction", entity_columns("auction")).map(
        a_id=col("id"), reserve=col("reserve"), a_date_time=col("date_time"), expires=col("expires")
    )
    offers = q.source("bid", entity_columns("bid")).map(
        b_auction=col("auction"), price=col("price"), b_date_time=col("date_time")
    )
    lots.key_by("a_id").winner_at_close(
        offers.key_by("b_auction"),
        opens="a_date_time",
        closes="expires",
        at="b_date_time",
        by="price",
        condition=col("price") >= col("reserve"),
    ).map(auction=col("a_id"), price=col("price"), b_date_time=col("b_date_time")).sink()
    return q.build()


def test_each_auction_is_won_by_the_best_bid_inside_its_life(spark: SparkSession, tmp_path: Path) -> None:
    out = read_results(_run(spark, _winners_plan(), tmp_path))
    got = {(r["auction"], r["price"], r["b_date_time"]) for r in out.to_pylist()}
    assert got == WINNERS
    assert out.num_rows == len(WINNERS), "one row per auction with a winner"


@pytest.mark.parametrize("query", ["q4", "q6"])
def test_q4_and_q6_over_the_hand_made_events_equal_the_reference(
    spark: SparkSession, tmp_path: Path, query: str
) -> None:
    params = QueryParams()
    out = read_results(_run(spark, QUERIES[query].plan(params), tmp_path), OUTPUT_SCHEMAS[query])
    expected = compute_reference(query, {"auction": AUCTIONS, "bid": BIDS}, params)
    assert expected.num_rows > 0
    assert diff_results(out, expected) is None, diff_results(out, expected)


def test_the_hand_made_winners_are_what_the_reference_decides() -> None:
    """The same rule on the reference's side: Q6 with one auction per seller averages one winner."""
    got = compute_reference("q6", {"auction": AUCTIONS, "bid": BIDS}).to_pylist()
    assert {(r["auction"], r["avg_price"]) for r in got} == {(a, float(p)) for a, p, _ in WINNERS}

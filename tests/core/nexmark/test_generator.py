"""The NEXMark generator: determinism over ranges, the 1:3:46 mix, referential integrity, timing, export."""

from __future__ import annotations

import re
from itertools import pairwise
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.errors import ConfigError
from core.nexmark.export import export_schema, read_events, write_events
from core.nexmark.generator import (
    FIRST_EVENT_TIME_US,
    GeneratorConfig,
    event_ids,
    generate,
    generate_ids,
    iter_batches,
)
from core.nexmark.schedule import RateSchedule
from core.nexmark.schema import (
    AUCTION_SCHEMA,
    BID_SCHEMA,
    END_OF_STREAM_TIME_US,
    ENTITIES,
    PERSON_SCHEMA,
    schema_for,
    spark_ddl,
)

CONFIG = GeneratorConfig(seed=7, events=20_000)


def _table(config: GeneratorConfig, entity: str, start: int = 0, end: int | None = None) -> pa.Table:
    return pa.Table.from_batches([generate(config, entity, start, config.events if end is None else end)])


@pytest.fixture(scope="module")
def tables() -> dict[str, pa.Table]:
    return {entity: _table(CONFIG, entity) for entity in ENTITIES}


def test_schemas_match_the_contract() -> None:
    assert schema_for("bid") is BID_SCHEMA
    assert PERSON_SCHEMA.names == [
        "id",
        "name",
        "email_address",
        "credit_card",
        "city",
        "state",
        "date_time",
        "extra",
    ]
    assert AUCTION_SCHEMA.field("expires").type == pa.timestamp("us", tz="UTC")
    assert spark_ddl("bid") == (
        "auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, "
        "date_time TIMESTAMP, extra STRING"
    )
    assert END_OF_STREAM_TIME_US == 4_102_444_800 * 1_000_000
    with pytest.raises(ConfigError):
        schema_for("seller")


@pytest.mark.parametrize("entity", ENTITIES)
def test_batches_have_exactly_the_entity_schema(tables: dict[str, pa.Table], entity: str) -> None:
    assert tables[entity].schema == schema_for(entity)
    assert tables[entity].num_rows > 0
    assert all(column.null_count == 0 for column in tables[entity].columns)
    assert generate(CONFIG, entity, 5, 5).schema == schema_for(entity)


def test_mix_is_1_3_46(tables: dict[str, pa.Table]) -> None:
    assert {entity: tables[entity].num_rows for entity in ENTITIES} == {
        "person": 400,
        "auction": 1200,
        "bid": 18_400,
    }
    slots = {entity: np.unique(event_ids(entity, 0, 100) % 50) for entity in ENTITIES}
    assert slots["person"].tolist() == [0]
    assert slots["auction"].tolist() == [1, 2, 3]
    assert slots["bid"].tolist() == list(range(4, 50))


@given(st.sampled_from(ENTITIES), st.integers(0, 400), st.integers(0, 400))
def test_event_ids_match_brute_force(entity: str, start: int, length: int) -> None:
    slot = {"person": range(0, 1), "auction": range(1, 4), "bid": range(4, 50)}[entity]
    expected = [n for n in range(start, start + length) if n % 50 in slot]
    assert event_ids(entity, start, start + length).tolist() == expected


def test_ids_are_dense_from_1000(tables: dict[str, pa.Table]) -> None:
    assert tables["person"]["id"].to_pylist() == list(range(1000, 1400))
    assert tables["auction"]["id"].to_pylist() == list(range(1000, 2200))


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from(ENTITIES),
    st.integers(0, 2**63),
    st.integers(0, 3_000),
    st.lists(st.integers(0, 3_200), max_size=6),
)
def test_any_split_of_a_range_generates_the_same_rows(
    entity: str, seed: int, events: int, cuts: list[int]
) -> None:
    config = GeneratorConfig(seed=seed, events=events)
    whole = _table(config, entity, 0, events + 100)  # past the end is clamped
    ranges = list(pairwise([0, *sorted(cuts), events + 100]))
    pieces = [generate(config, entity, lo, hi) for lo, hi in ranges]
    assert pa.Table.from_batches(pieces, schema=schema_for(entity)).equals(whole)
    # Generating the pieces in the opposite order, or replaying the whole range, changes nothing.
    backwards = [generate(config, entity, lo, hi) for lo, hi in reversed(ranges)][::-1]
    assert pa.Table.from_batches(backwards, schema=schema_for(entity)).equals(whole)
    assert _table(config, entity, 0, events).equals(whole)


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ENTITIES), st.integers(0, 2**63), st.integers(0, 2**64 - 1))
def test_any_subset_of_ids_generates_the_rows_of_the_whole_range(entity: str, seed: int, bits: int) -> None:
    """The router builds only the records its route keeps: they must be the whole range's rows."""
    config = GeneratorConfig(seed=seed, events=3_000)
    ids = event_ids(entity, 0, 3_000)
    keep = np.array([(bits >> (i % 64)) & 1 == 1 for i in range(len(ids))], dtype=bool)
    whole = generate(config, entity, 0, 3_000).filter(pa.array(keep))
    subset = generate_ids(config, entity, ids[keep])
    assert pa.Table.from_batches([subset]).equals(pa.Table.from_batches([whole]))


@settings(max_examples=40, deadline=None)
@given(st.sampled_from(ENTITIES), st.integers(0, 2**63), st.data())
def test_any_subset_of_columns_generates_those_columns_of_the_whole_rows(
    entity: str, seed: int, data: st.DataObject
) -> None:
    """The router builds only the columns a worker reads: each must equal that column of the rows."""
    names = schema_for(entity).names
    columns = data.draw(st.sets(st.sampled_from(names), min_size=1))
    config = GeneratorConfig(seed=seed, events=3_000)
    whole = generate(config, entity, 0, 3_000)
    subset = generate_ids(config, entity, event_ids(entity, 0, 3_000), columns)
    assert subset.schema.names == [n for n in names if n in columns]  # in the schema's order
    assert subset.equals(whole.select(subset.schema.names))


def test_unknown_columns_are_refused() -> None:
    with pytest.raises(ConfigError, match="no columns"):
        generate_ids(CONFIG, "bid", event_ids("bid", 0, 100), ["auction", "nope"])


def test_iter_batches_cover_everything(tables: dict[str, pa.Table]) -> None:
    for entity in ENTITIES:
        batches = list(iter_batches(CONFIG, entity, batch_events=777))
        assert all(batch.num_rows > 0 for batch in batches)
        assert pa.Table.from_batches(batches).equals(tables[entity])


def test_seed_changes_the_values_not_the_shape() -> None:
    other = _table(GeneratorConfig(seed=8, events=20_000), "bid")
    mine = _table(CONFIG, "bid")
    assert other.num_rows == mine.num_rows
    assert other["date_time"].equals(mine["date_time"])
    assert not other["price"].equals(mine["price"])


def test_referential_integrity(tables: dict[str, pa.Table]) -> None:
    person_ids = set(tables["person"]["id"].to_pylist())
    auction_ids = set(tables["auction"]["id"].to_pylist())
    bids, auctions = tables["bid"], tables["auction"]
    bid_n = event_ids("bid", 0, CONFIG.events)
    auction_n = event_ids("auction", 0, CONFIG.events)
    # Every id refers to an entity generated at or before the referring event.
    assert set(bids["auction"].to_pylist()) <= auction_ids
    assert set(bids["bidder"].to_pylist()) <= person_ids
    assert set(auctions["seller"].to_pylist()) <= person_ids
    assert np.all(bids["auction"].to_numpy() <= 1000 + (bid_n // 50) * 3 + 2)
    assert np.all(bids["bidder"].to_numpy() <= 1000 + bid_n // 50)
    assert np.all(auctions["seller"].to_numpy() <= 1000 + auction_n // 50)
    # ... so the referenced entity is never newer than the reference.
    auction_time = dict(zip(auctions["id"].to_pylist(), auctions["date_time"].to_pylist(), strict=True))
    assert all(
        auction_time[a] <= t
        for a, t in zip(bids["auction"].to_pylist(), bids["date_time"].to_pylist(), strict=True)
    )


def test_hot_entities_get_the_lions_share(tables: dict[str, pa.Table]) -> None:
    bids = tables["bid"]
    top_auction = pc.max(pc.value_counts(bids["auction"]).field("counts")).as_py()
    # Half of the bids go to the hot auction of the current 100-auction block (here: at most 12 blocks).
    assert 0.4 * bids.num_rows / 12 < top_auction
    bidder_share = np.mean((bids["bidder"].to_numpy() - 1000) % 100 == 1)
    assert 0.7 < bidder_share < 0.85
    seller_share = np.mean((tables["auction"]["seller"].to_numpy() - 1000) % 100 == 0)
    assert 0.7 < seller_share < 0.85


def test_field_domains(tables: dict[str, pa.Table]) -> None:
    persons, auctions, bids = tables["person"], tables["auction"], tables["bid"]
    assert set(persons["state"].to_pylist()) == {"AZ", "CA", "ID", "OR", "WA", "WY"}
    assert all(
        re.fullmatch(r"[a-z]{3,7}@[a-z]{3,5}\.com", email) for email in persons["email_address"].to_pylist()
    )
    assert all(re.fullmatch(r"\d{4} \d{4} \d{4} \d{4}", card) for card in persons["credit_card"].to_pylist())
    assert all(re.fullmatch(r"[A-Z][a-z]+ [A-Z][a-z]+", name) for name in persons["name"].to_pylist())
    assert set(auctions["category"].to_pylist()) == {10, 11, 12, 13, 14}
    initial, reserve = auctions["initial_bid"].to_numpy(), auctions["reserve"].to_numpy()
    assert np.all(initial >= 100) and np.all(initial <= 100_000_000) and np.all(reserve > initial)
    prices = bids["price"].to_numpy()
    assert prices.min() >= 100 and prices.max() <= 100_000_000
    # log-uniform: each decade of prices holds about a sixth of the bids.
    decades = np.histogram(np.log10(prices / 100), bins=6, range=(0, 6))[0] / len(prices)
    assert np.all(np.abs(decades - 1 / 6) < 0.03)
    duration_us = auctions["expires"].to_numpy().astype(np.int64) - auctions["date_time"].to_numpy().astype(
        np.int64
    )
    assert duration_us.min() >= 2_000_000 and duration_us.max() <= 20_000_000
    assert np.all(duration_us % 1000 == 0)
    for column in ("item_name", "description"):
        assert all(re.fullmatch(r"[a-z][a-z ]*[a-z]", text) for text in auctions[column].to_pylist())
    assert max(len(extra) for extra in bids["extra"].to_pylist()) <= 16
    for channel, url in zip(bids["channel"].to_pylist(), bids["url"].to_pylist(), strict=True):
        assert url.startswith("https://www.nexmark.com/")
        if channel.startswith("channel-"):
            assert url.endswith(f"channel_id={channel.removeprefix('channel-')}")
        else:
            assert f"/{channel.lower()}/" in url


def test_constant_schedule_timing(tables: dict[str, pa.Table]) -> None:
    # 10,000 events/s: event n at first_event_time + n * 100 us.
    for entity in ENTITIES:
        n = event_ids(entity, 0, CONFIG.events)
        times = tables[entity]["date_time"].to_numpy().astype(np.int64)
        assert np.array_equal(times, FIRST_EVENT_TIME_US + n * 100)
    assert tables["person"]["date_time"][0].as_py().isoformat() == "2026-01-01T00:00:00+00:00"


def test_burst_schedule_timing() -> None:
    config = GeneratorConfig(
        seed=1, events=60_000, schedule=RateSchedule.parse("2:10000,1:40000"), first_event_time_us=0
    )
    times = _table(config, "bid")["date_time"].to_numpy().astype(np.int64)
    n = event_ids("bid", 0, 60_000)
    expected = np.where(n < 20_000, n * 100, 2_000_000 + (n - 20_000) * 25)
    assert np.array_equal(times, expected)
    assert np.all(np.diff(times) > 0)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"seed": -1, "events": 10},
        {"seed": 1, "events": -1},
        {"seed": "1", "events": 10},
        {"seed": 1, "events": 1.5},
    ],
)
def test_config_validation(kwargs: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        GeneratorConfig(**kwargs)  # type: ignore[arg-type]


def test_export_round_trip(tmp_path: Path, tables: dict[str, pa.Table]) -> None:
    counts = write_events(CONFIG, tmp_path, batch_events=7_000)
    assert counts == {"person": 400, "auction": 1200, "bid": 18_400}
    assert sorted(p.name for p in (tmp_path / "bid").iterdir()) == [
        "part-00000.parquet",
        "part-00001.parquet",
        "part-00002.parquet",
    ]
    read = read_events(tmp_path)
    for entity in ENTITIES:
        table = read[entity]
        assert table.schema == export_schema(entity)
        assert table.select(schema_for(entity).names).equals(tables[entity])
        assert table["event_id"].to_pylist() == event_ids(entity, 0, CONFIG.events).tolist()
        assert table["arrival_time"].equals(table["date_time"])
    # A smaller re-export replaces the old parts instead of mixing with them.
    assert write_events(GeneratorConfig(seed=7, events=30), tmp_path) == {
        "person": 1,
        "auction": 3,
        "bid": 26,
    }
    assert {entity: t.num_rows for entity, t in read_events(tmp_path).items()} == {
        "person": 1,
        "auction": 3,
        "bid": 26,
    }
    assert write_events(GeneratorConfig(seed=7, events=0), tmp_path) == {"person": 0, "auction": 0, "bid": 0}
    assert read_events(tmp_path)["bid"].schema == export_schema("bid")

"""Routed reads of the Kinesis source (ADR 0050), against an in-memory stream: the VM's read and the
workers' read cut their batches apart, yet every record gets one routing decision from its shard's
log, whichever read planned it first and whatever plan was current then; the VM's read keeps exactly
the records that decision leaves it and notes how many it read and sent.

The stream is a stand-in for Kinesis's API (tests/core/kinesis_stand_in.py), which is allowed here
because this is the unit test of the code that talks to it; tests/core/spark/test_kinesis_source.py
runs the same reads against LocalStack, inside Spark.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any
from unittest.mock import patch

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from core.kinesis import END_OF_STREAM_BYTES, KinesisEndpoint, shard_units
from core.nexmark.generator import GeneratorConfig
from core.offload_plan import OffloadPlan
from core.produce import event_records
from core.spark.kinesis_source import KinesisSourceOptions, KinesisStreamReader, ShardRange
from router.routing_log import routed_mask, write_current_plan
from router.source_router import HEARTBEAT, routed_counts
from tests.core.kinesis_stand_in import MemoryStream

SHARDS = ("shardId-000000000000", "shardId-000000000001")


def served(stream: MemoryStream) -> Any:
    """Every Kinesis client made meanwhile is `stream` (the driver's and each task's)."""
    return patch.object(KinesisEndpoint, "client", lambda _: stream)


def stream_of(seed: int, events: int) -> dict[str, list[bytes]]:
    """NEXMark events spread over two shards as `sponge produce` writes them, a few bad records among
    them, and each shard's end-of-stream marker."""
    rng = random.Random(seed)
    shards: dict[str, list[bytes]] = {s: [] for s in SHARDS}
    for key, data in event_records(GeneratorConfig(seed=seed, events=events), 0, events):
        shards[SHARDS[int(key) % len(SHARDS)]].append(data)
        if rng.random() < 0.03:
            shards[rng.choice(SHARDS)].append(b'{"type": "bid", "auction": "not a number"}')
    return {s: [*records, END_OF_STREAM_BYTES] for s, records in shards.items()}


def reader(tmp_path: Path, route: str, per_shard: int) -> KinesisStreamReader:
    options = KinesisSourceOptions.parse(
        {
            "stream": "nexmark",
            "entity": "bid",
            "dead_letter": str(tmp_path / "dead"),
            "max_records_per_shard": str(per_shard),
            "route": route,
            "offload_dir": str(tmp_path / "offload"),
            **({"program": "{}", "agent": "127.0.0.1:1", "secret_file": "s"} if route == "offload" else {}),
        }
    )
    return KinesisStreamReader(options)


def batches(
    reads: tuple[KinesisStreamReader, ...], plans: list[OffloadPlan], offload_dir: Path
) -> list[list[ShardRange]]:
    """Every task of each read, planned in rounds as Spark asks every stream of a query in turn; the
    current plan changes to the next of `plans` before each round."""
    parts: list[list[ShardRange]] = [[] for _ in reads]
    starts = [r.initialOffset() for r in reads]
    for i in range(10_000):
        write_current_plan(offload_dir, plans[min(i, len(plans) - 1)])
        for n, read in enumerate(reads):
            if starts[n].get("done"):
                continue
            end = read.latestOffset(starts[n])
            parts[n] += [p for p in read.partitions(starts[n], end) if isinstance(p, ShardRange)]
            starts[n] = end
        if all(s.get("done") for s in starts):
            return parts
    raise AssertionError("the stream never ended")


def decisions(parts: list[ShardRange]) -> dict[int, bool]:
    """Unit -> sent to the workers, for every record of the tasks."""
    out: dict[int, bool] = {}
    for p in parts:
        if p.shard is None:
            continue
        units = np.array(shard_units(p.shard, p.first, p.count), dtype=np.int64)
        for unit, sent in zip(units.tolist(), routed_mask(p.segments, units).tolist(), strict=True):
            assert unit not in out, "a record in two tasks of one read"
            out[unit] = sent
    return out


@settings(max_examples=15, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    cuts=st.tuples(st.integers(5, 60), st.integers(5, 60)),
    shares=st.lists(st.sampled_from([0.0, 0.3, 0.5, 1.0]), min_size=1, max_size=6),
)
def test_both_reads_route_every_record_alike_and_the_vm_keeps_the_rest(
    tmp_path_factory: pytest.TempPathFactory, seed: int, cuts: tuple[int, int], shares: list[float]
) -> None:
    tmp_path = tmp_path_factory.mktemp("ks")
    stream = MemoryStream(stream_of(seed, 300))
    plans = [OffloadPlan.of_share(v + 1, share, 2) for v, share in enumerate(shares)]
    local = reader(tmp_path, "local", cuts[0])
    offload = reader(tmp_path, "offload", cuts[1])
    with served(stream):
        local_parts, offload_parts = batches((local, offload), plans, tmp_path / "offload")
        table = pa.Table.from_batches([batch for p in local_parts for batch in local.read(p)])
    sent = decisions(local_parts)
    assert sent == decisions(offload_parts)
    assert len(sent) == sum(len(records) for records in stream.shards.values())  # every record, once

    rows = table.filter(pc.is_null(table[HEARTBEAT]))
    valid = {}  # unit -> the bid's (auction, bidder), for every valid bid of the stream
    for shard, records in stream.shards.items():
        for ordinal, (_, data) in enumerate(records):
            obj = json.loads(data) if data != END_OF_STREAM_BYTES else {}
            if obj.get("type") == "bid" and isinstance(obj.get("auction"), int):
                valid[shard_units(shard, ordinal, 1).start] = (obj["auction"], obj["bidder"])
    expected = sorted(v for unit, v in valid.items() if not sent[unit])
    assert sorted(zip(rows["auction"].to_pylist(), rows["bidder"].to_pylist(), strict=True)) == expected
    assert routed_counts(tmp_path / "offload", ["bid"]) == (len(valid), sum(sent[u] for u in valid))
    dead = [json.loads(line) for f in (tmp_path / "dead" / "bid").glob("*.jsonl") for line in f.open()]
    assert len(dead) == sum(
        r[1].startswith(b'{"type": "bid", "auction": "not') for s in stream.shards.values() for r in s
    )


def test_a_replayed_batch_gets_the_plans_its_first_attempt_got(tmp_path: Path) -> None:
    read = reader(tmp_path, "local", 20)
    half, all_ = OffloadPlan.of_share(1, 0.5, 2), OffloadPlan.of_share(2, 1.0, 2)
    write_current_plan(tmp_path / "offload", half)
    with served(MemoryStream(stream_of(1, 100))):
        start = read.initialOffset()
        end = read.latestOffset(start)
        first = read.partitions(start, end)
        write_current_plan(tmp_path / "offload", all_)
        assert read.partitions(start, end) == first
        later = read.partitions(end, read.latestOffset(end))
    assert {s.plan for p in first for s in p.segments} == {half}  # type: ignore[attr-defined]
    assert {s.plan for p in later for s in p.segments} == {all_}  # type: ignore[attr-defined]


def test_a_routed_reads_schema_carries_the_heartbeat(tmp_path: Path) -> None:
    from core.spark.kinesis_source import KinesisDataSource

    options = {"stream": "s", "entity": "bid", "dead_letter": str(tmp_path)}
    source = KinesisDataSource({**options, "route": "local", "offload_dir": str(tmp_path)})
    assert HEARTBEAT in source.schema().fieldNames()  # type: ignore[union-attr]

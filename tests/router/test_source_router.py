"""The routed read: its options (how much an epoch may cover while a share is offloaded, ADR 0008), and
which records of a task each of the two streams yields, on every attempt."""

from __future__ import annotations

import threading
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest

from core.nexmark.generator import GeneratorConfig, date_time_us, event_ids, generate_ids
from core.nexmark.schema import END_OF_STREAM_TIME_US, schema_for
from core.offload_plan import OffloadPlan, record_units
from lambda_worker.program import ProgramSpec
from router import source_router
from router.routing_log import Segment
from router.source_router import HEARTBEAT, RouteOptions, read_routed, sent_columns

# ---- read_routed: one source task of the VM's stream or the workers' stream ------------------------

CONFIG = GeneratorConfig(seed=3, events=5000)
HALF = OffloadPlan(version=1, share=0.5, workers=2)
ALL = OffloadPlan(version=2, share=1.0, workers=2)
Q1 = ProgramSpec("q1", ("map1",))  # keeps date_time, so every output row names its event


class FakeAgent:
    """Stands in for the agent: runs the chain on each chunk in this process and remembers the calls."""

    def __init__(self) -> None:
        self.program = Q1.compile()
        self.calls: list[tuple[int, int, int, pa.RecordBatch]] = []
        self._lock = threading.Lock()

    def offload(
        self, start: int, end: int, seq: int, spec: ProgramSpec, chunk: pa.RecordBatch, sink_file: str = ""
    ) -> SimpleNamespace:
        assert spec == Q1 and sink_file == ""
        with self._lock:
            self.calls.append((start, end, seq, chunk))
        return SimpleNamespace(table=self.program.run_table(chunk))

    def chunks(self) -> list[tuple[int, int, int, pa.RecordBatch]]:
        return sorted(self.calls, key=lambda call: call[:3])


@pytest.fixture
def agent(monkeypatch: pytest.MonkeyPatch) -> FakeAgent:
    fake = FakeAgent()
    monkeypatch.setattr(source_router, "_client", lambda route: fake)
    return fake


def _route(route: str, **extra: Any) -> RouteOptions:
    if route == "local":
        return RouteOptions(route="local", offload_dir=Path("/unused"), **extra)
    options = {
        "program": Q1.dumps(),
        "agent": "127.0.0.1:1",
        "secret_file": "/unused",
        "event_time": "date_time",
        "chunk_rows": 100,
        "parallelism": 3,
    }
    return RouteOptions(route="offload", offload_dir=Path("/unused"), **{**options, **extra})


def _read(route: RouteOptions, start: int, end: int, segments: tuple[Segment, ...], **kw: Any) -> pa.Table:
    return pa.Table.from_batches(
        list(read_routed(CONFIG, "bid", route, start, end, kw.pop("punctuate", False), segments, **kw))
    )


def _time_us(table: pa.Table, heartbeat: bool) -> np.ndarray:
    rows = table.filter(pc.is_valid(table[HEARTBEAT]) if heartbeat else pc.is_null(table[HEARTBEAT]))
    return rows["date_time"].cast(pa.int64()).to_numpy()


def _event_ids(table: pa.Table, start: int, end: int) -> np.ndarray:
    """The events of a route's record rows, found by their event time (unique per event)."""
    ids = event_ids("bid", start, end)
    times = date_time_us(CONFIG, ids)
    assert len(np.unique(times)) == len(ids)
    found = np.searchsorted(times, _time_us(table, heartbeat=False))
    assert np.array_equal(times[found], _time_us(table, heartbeat=False))
    return ids[found]


def test_the_two_routes_split_a_task_by_the_plan_of_each_offset(agent: FakeAgent) -> None:
    """Half the records below offset 3000 and all above it go to the workers; the VM keeps the rest.
    Every record is in exactly one stream, the VM's rows are the records themselves, and the workers
    get only the columns their chain reads, in chunks keyed by the task's range."""
    segments = (Segment(0, HALF), Segment(3000, ALL))
    local, offloaded = (
        _read(_route("local"), 2000, 4000, segments),
        _read(_route("offload"), 2000, 4000, segments),
    )

    ids = event_ids("bid", 2000, 4000)
    kept, sent = _event_ids(local, 2000, 4000), _event_ids(offloaded, 2000, 4000)
    assert np.array_equal(np.sort(np.concatenate([kept, sent])), ids)  # each record once
    below = ids[ids < 3000]
    assert np.array_equal(sent[sent < 3000], below[record_units(below) < 0.5])  # the plan's own hash
    assert np.array_equal(sent[sent >= 3000], ids[ids >= 3000])
    assert 0 < len(kept) < len(below)

    records = local.filter(pc.is_null(local[HEARTBEAT])).drop_columns([HEARTBEAT])
    assert records.equals(pa.Table.from_batches([generate_ids(CONFIG, "bid", kept)]))
    chunks = agent.chunks()
    assert [call[:3] for call in chunks] == [(2000, 4000, seq) for seq in range(-(-len(sent) // 100))]
    sent_rows = pa.concat_tables([pa.table(call[3]) for call in chunks])
    columns = sent_columns(schema_for("bid"), _route("offload"))
    assert sent_rows.equals(pa.Table.from_batches([generate_ids(CONFIG, "bid", sent, columns)]))
    # One heartbeat each, at the time of the task's last event, so both watermarks move.
    last = date_time_us(CONFIG, np.array([3999]))
    assert np.array_equal(_time_us(local, heartbeat=True), last)
    assert np.array_equal(_time_us(offloaded, heartbeat=True), last)


def test_a_task_with_nothing_offloaded_never_calls_the_agent(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_agent(route: RouteOptions) -> None:
        raise AssertionError("the agent was called for a task with nothing to offload")

    monkeypatch.setattr(source_router, "_client", no_agent)
    segments = (Segment(0, OffloadPlan.local(0)),)
    offloaded = _read(_route("offload"), 0, 1000, segments)
    assert offloaded.num_rows == 1 and offloaded[HEARTBEAT].to_pylist() == [True]
    local = _read(_route("local"), 0, 1000, segments)
    assert np.array_equal(_event_ids(local, 0, 1000), event_ids("bid", 0, 1000))


def test_the_task_holding_the_end_of_stream_adds_the_punctuation(agent: FakeAgent) -> None:
    segments = (Segment(0, HALF),)
    for route in ("local", "offload"):
        table = _read(_route(route), 4900, 5001, segments, punctuate=True)
        assert list(_time_us(table, heartbeat=True)) == [
            date_time_us(CONFIG, np.array([4999]))[0],
            END_OF_STREAM_TIME_US,
        ]
        # Past the last event there are no records, only the punctuation.
        alone = _read(_route(route), 5000, 5001, segments, punctuate=True)
        assert alone.num_rows == 1 and list(_time_us(alone, heartbeat=True)) == [END_OF_STREAM_TIME_US]


def test_a_replayed_task_yields_the_same_rows_and_asks_for_the_same_chunks(agent: FakeAgent) -> None:
    """A retried task must hand Spark exactly what the first attempt did, and ask the agent for the
    same chunk keys with the same records, so it gets the agent's cached answers."""
    segments = (Segment(0, HALF), Segment(3000, ALL))
    for route in ("local", "offload"):
        first = _read(_route(route), 2000, 4000, segments, attempt=0)
        assert _read(_route(route), 2000, 4000, segments, attempt=0).equals(first)
        assert _read(_route(route), 2000, 4000, segments, attempt=1).equals(first)
    per_attempt = len(agent.calls) // 3
    assert per_attempt > 1 and len(agent.calls) == 3 * per_attempt
    attempts = [
        sorted(agent.calls[i * per_attempt : (i + 1) * per_attempt], key=lambda c: c[:3]) for i in range(3)
    ]
    for again in attempts[1:]:
        assert [c[:3] for c in again] == [c[:3] for c in attempts[0]]
        assert all(x[3].equals(y[3]) for x, y in zip(again, attempts[0], strict=True))


def test_an_injected_failure_fails_the_first_attempt_only_after_its_chunks_went_out(
    agent: FakeAgent, tmp_path: Path
) -> None:
    segments = (Segment(0, HALF),)
    route = _route("offload", fail_share=1.0, fault_dir=str(tmp_path))
    rows: list[pa.RecordBatch] = []
    with pytest.raises(RuntimeError, match="injected task failure"):
        rows.extend(read_routed(CONFIG, "bid", route, 0, 1000, False, segments, attempt=0))
    sent_by_failed = agent.chunks()
    assert sent_by_failed and len(list(tmp_path.iterdir())) == 1  # the chunks went out; the marker is there
    retry = _read(route, 0, 1000, segments, attempt=1)
    # The retry routes every record as the failed attempt did, and asks for the same chunks.
    assert pa.Table.from_batches(rows).equals(retry.slice(0, retry.num_rows - 1))
    assert [c[:3] for c in agent.chunks()] == sorted([c[:3] for c in sent_by_failed] * 2)
    # Outside a Spark task (no attempt number) nothing is injected.
    assert _read(route, 0, 1000, segments).equals(retry)


# ---- a stream that feeds a keyed stage: routed by key group, stashed, receipts ------------------------

Q4_PREFIX = ProgramSpec("q4", ("map4", "key_by5"))  # the bids' way into winner_at_close6
GROUPS = OffloadPlan.of_share(3, 0.25, 2)  # the first 32 key groups (and a record share the stream ignores)


class FakeStash:
    def __init__(self) -> None:
        self.chunks: dict[tuple[int, int, int], pa.Table] = {}
        self._lock = threading.Lock()

    def stash(self, entity: str, start: int, end: int, seq: int, records: pa.Table) -> None:
        assert entity == "bid"
        with self._lock:
            self.chunks[(start, end, seq)] = records


def test_a_keyed_stream_sends_whole_key_groups_and_yields_receipts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The VM keeps every record of the groups the plan leaves it, the workers' stream stashes every
    record of the others, chunk by chunk, and yields one receipt per (chunk, group)."""
    from core.offload_plan import key_groups_of
    from merge.keyed_groups import GROUP
    from router.keyed_route import SEQ

    fake = FakeStash()
    monkeypatch.setattr(source_router, "_client", lambda route: fake)
    segments = (Segment(0, GROUPS),)
    local = _read(_route("local", keys=("auction",)), 1000, 3000, segments)
    keyed = _route("offload", program=Q4_PREFIX.dumps(), event_time="sponge_time", keys=("auction",))
    receipts = _read(keyed, 1000, 3000, segments)

    kept = local.filter(pc.is_null(local[HEARTBEAT]))
    assert all(g >= 32 for g in key_groups_of(kept["auction"]))
    stashed = pa.concat_tables(fake.chunks[k] for k in sorted(fake.chunks))
    assert all(g < 32 for g in stashed[GROUP].to_pylist())
    assert kept.num_rows + stashed.num_rows == len(event_ids("bid", 1000, 3000))  # each record once
    rows = receipts.filter(pc.is_null(receipts[HEARTBEAT]))
    named = {(r[SEQ], r[GROUP]) for r in rows.to_pylist()}
    want = {(seq, g) for (_, _, seq), t in fake.chunks.items() for g in set(t[GROUP].to_pylist())}
    assert named == want and len(rows) == len(named)
    assert receipts.filter(pc.is_valid(receipts[HEARTBEAT])).num_rows == 1  # the watermark still moves

"""The agent with the embedded fleet: real worker processes, real failures, exact results.

Every scenario offloads chunks of generated NEXMark bids and checks that the merged partials equal
the aggregate computed directly over the whole input: no chunk lost, none counted twice.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from lambda_worker.program import ProgramSpec
from merge.partials import finalize, merge_partials
from router import stats
from router.agent.server import AgentServer
from router.client import AgentClient, OffloadResult
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig, WorkerFaults
from tests.router.conftest import Q5, Q7, bids

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

S = 1_000_000
CHUNK = 8_000


def _fleet(tmp_path, **kw: Any) -> EmbeddedFleet:  # type: ignore[no-untyped-def]
    return EmbeddedFleet(
        EmbeddedFleetConfig(**{"concurrency_limit": 2, "log_path": str(tmp_path / "w.log"), **kw})
    )


def _chunks(data: pa.Table) -> list[pa.Table]:
    return [data.slice(i, CHUNK) for i in range(0, data.num_rows, CHUNK)]


def _offload_all(
    client: AgentClient, spec: ProgramSpec, chunks: list[pa.Table], first_seq: int = 0
) -> list[OffloadResult]:
    with ThreadPoolExecutor(4) as pool:  # like concurrent Spark tasks
        futures = [pool.submit(client.offload, 1, 0, first_seq + i, spec, c) for i, c in enumerate(chunks)]
        return [f.result() for f in futures]


def _direct_q5(data: pa.Table) -> Counter:
    want: Counter = Counter()
    times = pc.cast(data["date_time"], pa.int64()).to_pylist()
    for t, a in zip(times, data["auction"].to_pylist(), strict=True):
        pane = t - t % (2 * S)
        for start in range(pane - 8 * S, pane + 1, 2 * S):
            want[(start, a)] += 1
    return want


def _merged_q5(results: list[OffloadResult]) -> Counter:
    op = Q5.compile().aggregate
    table = finalize(op, merge_partials(op, [r.table for r in results]))  # type: ignore[arg-type]
    starts = pc.cast(table["window_start"], pa.int64()).to_pylist()
    return Counter(
        dict(
            zip(
                zip(starts, table["auction"].to_pylist(), strict=True),
                table["num_bids"].to_pylist(),
                strict=True,
            )
        )
    )


def _direct_q7(data: pa.Table) -> dict[int, list]:
    by_window: dict[int, list] = defaultdict(list)
    for r in data.to_pylist():
        by_window[int(r["date_time"].timestamp()) // 10].append(r)
    out = {}
    for w, members in by_window.items():
        best = max(m["price"] for m in members)
        fields = ("auction", "bidder", "price", "date_time", "extra")
        out[w] = sorted(({f: m[f] for f in fields} for m in members if m["price"] == best), key=repr)
    return out


def _merged_q7(results: list[OffloadResult]) -> dict[int, list]:
    op = Q7.compile().aggregate
    table = finalize(op, merge_partials(op, [r.table for r in results]))  # type: ignore[arg-type]
    return {int(r["window_start"].timestamp()) // 10: sorted(r["top"], key=repr) for r in table.to_pylist()}


def _wait(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.02)


def test_q5_and_q7_chains_through_the_fleet_equal_the_direct_aggregates(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    agent: AgentServer = make_agent(_fleet(tmp_path))
    data = bids(60_000)
    chunks = _chunks(data)
    with AgentClient(agent.address, secret) as client:
        r5 = _offload_all(client, Q5, chunks)
        r7 = _offload_all(client, Q7, chunks)
        s = client.stats()
    assert _merged_q5(r5) == _direct_q5(data)
    assert _merged_q7(r7) == _direct_q7(data)
    assert all(r.worker_id and not r.ran_locally for r in r5 + r7)
    assert s[stats.CHUNKS_DONE] == 2 * len(chunks) and s[stats.CHUNKS_RUN_LOCALLY] == 0
    assert 1 <= s[stats.COLD_STARTS] <= s[stats.WORKERS_STARTED] <= 2
    # Every worker that said hello was either cold or warm, and counted once.
    assert s[stats.COLD_STARTS] + s[stats.WARM_STARTS] == s[stats.WORKERS_CONNECTED]


def test_a_worker_killed_mid_chunk_loses_nothing(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fleet = _fleet(tmp_path, faults={0: WorkerFaults(delay_s=5.0)})
    agent: AgentServer = make_agent(fleet)
    data = bids(40_000)
    chunks = _chunks(data)
    with AgentClient(agent.address, secret) as client, ThreadPoolExecutor(1) as pool:
        first = pool.submit(client.offload, 1, 0, 0, Q5, chunks[0])
        # Killed while it holds the chunk: whether the chunk is still on its way or the worker is asleep
        # inside it (delay_s), the agent sees a worker die with a chunk in flight and takes it back.
        _wait(lambda: agent.stats()[stats.CHUNKS_DISPATCHED] >= 1)
        victim = next(e for e in fleet.environments() if e.ordinal == 0)
        os.kill(victim.pid, signal.SIGKILL)
        results = [first.result(60), *_offload_all(client, Q5, chunks[1:], first_seq=1)]
        s = client.stats()
    assert results[0].redispatches == 1 and results[0].worker_id
    assert _merged_q5(results) == _direct_q5(data)
    assert s[stats.CHUNKS_REDISPATCHED] == 1 and s[stats.CHUNKS_DONE] == len(chunks)


def test_a_worker_crashing_in_a_chunk_loses_nothing(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    fleet = _fleet(tmp_path, faults={0: WorkerFaults(crash_in_chunk=1)})
    agent: AgentServer = make_agent(fleet)
    data = bids(30_000)
    chunks = _chunks(data)
    with AgentClient(agent.address, secret) as client:
        first = client.offload(1, 0, 0, Q7, chunks[0])  # alone: the first (crashing) worker takes it
        results = [first, *_offload_all(client, Q7, chunks[1:], first_seq=1)]
        _wait(lambda: client.stats()[stats.INVOKE_FAILURES] >= 1)
        s = client.stats()
    assert first.redispatches == 1 and first.worker_id
    assert _merged_q7(results) == _direct_q7(data)
    assert s[stats.CHUNKS_REDISPATCHED] == 1 and s[stats.CHUNKS_DONE] == len(chunks)
    assert fleet.counters["crashes"] == 1


@pytest.mark.parametrize("which", ["function_timeout", "chunk_timeout"])
def test_a_slow_worker_past_its_timeout_is_replaced(make_agent, secret, tmp_path, which: str) -> None:  # type: ignore[no-untyped-def]
    faults = {0: WorkerFaults(delay_s=60.0)}
    if which == "function_timeout":
        # The worker's stream carries the function's deadline (less the safety margin), so the stream
        # ends first and the chunk moves on; then the fleet kills the stuck environment.
        agent = make_agent(_fleet(tmp_path, timeout_s=3.0, faults=faults), dispatch={"chunk_timeout_s": 60.0})
    else:  # the agent gives up on the chunk and closes the worker's stream
        agent = make_agent(_fleet(tmp_path, timeout_s=60.0, faults=faults), dispatch={"chunk_timeout_s": 1.0})
    data = bids(20_000)
    with AgentClient(agent.address, secret) as client:
        first = client.offload(1, 0, 0, Q5, data.slice(0, CHUNK))
        rest = _offload_all(client, Q5, _chunks(data)[1:], first_seq=1)
        s = client.stats()
    assert first.redispatches == 1 and not first.ran_locally
    assert _merged_q5([first, *rest]) == _direct_q5(data)
    if which == "chunk_timeout":
        assert s[stats.CHUNK_TIMEOUTS] == 1
    else:
        _wait(lambda: agent.invoker.counters["timeouts"] == 1)
        _wait(lambda: agent.stats()[stats.INVOKE_FAILURES] >= 1)


def test_throttled_invokes_are_counted_and_every_chunk_still_done(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(
        _fleet(tmp_path, concurrency_limit=1),
        max_workers=3,
        throttle_backoff_s=0.2,
        dispatch={"local_fallback_s": 2.0},
    )
    data = bids(50_000)
    with AgentClient(agent.address, secret) as client:
        results = _offload_all(client, Q5, _chunks(data))
        s = client.stats()
    assert s[stats.THROTTLES] >= 1
    assert _merged_q5(results) == _direct_q5(data)
    assert s[stats.CHUNKS_DONE] == len(results)


def test_with_no_worker_to_be_had_chunks_run_in_the_agent(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # The one execution environment allowed hangs before it ever connects; every other invoke is throttled.
    stuck = _fleet(tmp_path, concurrency_limit=1, faults={0: WorkerFaults(stall_s=60.0)})
    agent = make_agent(stuck, throttle_backoff_s=0.05, dispatch={"local_fallback_s": 0.3})
    data = bids(20_000)
    with AgentClient(agent.address, secret) as client:
        results = _offload_all(client, Q7, _chunks(data))
        again = client.offload(1, 0, 0, Q7, _chunks(data)[0])  # a retried task: cached, not recomputed
        s = client.stats()
    assert all(r.ran_locally for r in results) and again.cached
    assert _merged_q7(results) == _direct_q7(data)
    assert s[stats.CHUNKS_RUN_LOCALLY] == len(results) and s[stats.THROTTLES] >= 1
    assert s[stats.CHUNKS_SUBMITTED] == len(results)


def test_the_agent_command_line_serves_and_stops_cleanly(secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(secret + b"\n")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "router.agent",
            "--port",
            "0",
            "--secret-file",
            str(secret_file),
            "--invoker",
            "embedded",
            "--max-workers",
            "1",
            "--concurrency-limit",
            "1",
            "--local-fallback-s",  # the worker must run the chunk, however long it takes to start here
            "60",
            "--worker-log",
            str(tmp_path / "w.log"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        assert hello["event"] == "listening" and hello["port"] > 0
        with AgentClient(f"127.0.0.1:{hello['port']}", secret) as client:
            result = client.offload(1, 0, 0, Q7, bids(5_000))
            assert result.worker_id and result.table.num_rows >= 1
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
        bye = json.loads(proc.stdout.readline())
        assert bye["event"] == "stopped" and bye[stats.CHUNKS_DONE] == 1
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_the_agent_command_line_rejects_a_weak_secret(tmp_path) -> None:  # type: ignore[no-untyped-def]
    weak = tmp_path / "secret"
    weak.write_text("short")
    proc = subprocess.run(
        [sys.executable, "-m", "router.agent", "--secret-file", str(weak), "--invoker", "none"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2 and "at least 16 bytes" in proc.stderr

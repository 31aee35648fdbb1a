"""`--inject` on a real agent with the embedded fleet: each fault happens, and nothing is lost or doubled.

Each scenario offloads NEXMark bids in chunks with one agent fault switched on, then checks that the
merged partials equal the aggregate over the whole input (every chunk's result counted exactly once)
and that the counters show both the fault (`injected_*`) and the recovery from it.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest

from core.fault_spec import FaultSpec
from router import stats
from router.agent.server import AgentServer
from router.client import AgentClient, OffloadResult
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig, WorkerFaults
from tests.router.conftest import Q5, bids
from tests.router.test_agent_embedded import _direct_q5, _merged_q5, _offload_all

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]  # embedded-fleet workers are processes


def _fleet(tmp_path, **kw: Any) -> EmbeddedFleet:  # type: ignore[no-untyped-def]
    return EmbeddedFleet(
        EmbeddedFleetConfig(**{"concurrency_limit": 4, "log_path": str(tmp_path / "w.log"), **kw})
    )


def _inject(*texts: str) -> dict[str, Any]:
    return {"faults": tuple(FaultSpec.parse(t) for t in texts)}


def _chunks(data: pa.Table, rows: int) -> list[pa.Table]:
    return [data.slice(i, rows) for i in range(0, data.num_rows, rows)]


def _check_exactly_once(data: pa.Table, results: list[OffloadResult], s: dict[str, Any]) -> None:
    assert _merged_q5(results) == _direct_q5(data)
    assert s[stats.CHUNKS_SUBMITTED] == s[stats.CHUNKS_DONE] == len(results)
    assert s[stats.RECORDS_OFFLOADED] + s[stats.RECORDS_RUN_LOCALLY] == data.num_rows
    assert s[stats.RECORDS_OFFLOADED] == sum(r.rows_in for r in results if not r.ran_locally)


def test_kill_worker_kills_busy_workers_and_their_chunks_are_redone(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # Every worker takes 0.25 s per chunk, so at each kill tick there is a worker in the middle of one.
    fleet = _fleet(tmp_path, faults={i: WorkerFaults(delay_s=0.25) for i in range(32)})
    agent: AgentServer = make_agent(fleet, agent=_inject("kill-worker:every=1s"))
    data = bids(45_000)
    with AgentClient(agent.address, secret) as client:
        results = _offload_all(client, Q5, _chunks(data, 4_000))
    agent.stop()  # its kill ticks go on while it runs: both counts are read once they have stopped
    s = agent.stats()
    assert s[stats.INJECTED_KILL_WORKER] >= 1 and fleet.counters["killed"] == s[stats.INJECTED_KILL_WORKER]
    assert s[stats.CHUNKS_REDISPATCHED] >= 1 and any(r.redispatches for r in results)
    _check_exactly_once(data, results, s)


def test_throttle_refuses_invokes_like_lambda_and_the_fleet_backs_off(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    # With the default seed the first invoke is refused; the fleet backs off and tries again.
    fleet = _fleet(tmp_path)
    agent: AgentServer = make_agent(fleet, agent=_inject("throttle:share=0.5"), throttle_backoff_s=0.1)
    data = bids(30_000)
    with AgentClient(agent.address, secret) as client:
        results = _offload_all(client, Q5, _chunks(data, 8_000))
        s = client.stats()
    assert s[stats.INJECTED_THROTTLE] >= 1 and s[stats.THROTTLES] >= s[stats.INJECTED_THROTTLE]
    assert s[stats.WORKERS_STARTED] >= 1 and not any(r.ran_locally for r in results)
    _check_exactly_once(data, results, s)
    assert s[stats.RECORDS_OFFLOADED] == data.num_rows


def test_slow_worker_stalls_first_dispatches_and_chunk_timeouts_recover(make_agent, secret, tmp_path) -> None:  # type: ignore[no-untyped-def]
    agent: AgentServer = make_agent(
        _fleet(tmp_path), agent=_inject("slow-worker:share=0.5,delay=4s"), dispatch={"chunk_timeout_s": 1.0}
    )
    data = bids(30_000)
    with AgentClient(agent.address, secret) as client:
        results = _offload_all(client, Q5, _chunks(data, 8_000))
        s = client.stats()
    assert s[stats.INJECTED_SLOW_WORKER] >= 1
    assert s[stats.CHUNK_TIMEOUTS] == s[stats.INJECTED_SLOW_WORKER]  # only the stalled ones, once each
    assert s[stats.CHUNKS_REDISPATCHED] >= s[stats.INJECTED_SLOW_WORKER]
    assert not any(r.ran_locally for r in results) and any(r.redispatches for r in results)
    _check_exactly_once(data, results, s)

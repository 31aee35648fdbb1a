"""The VM side survives its agent: a restart, a slow chunk, and a SIGKILL that must not orphan workers.

The agent runs as `python -m router.agent` (its real command line) where a process has to die; the
in-process agent is enough where only the client's behaviour is under test.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from router import stats
from router.client import AgentClient, OffloadError
from tests.router.conftest import Q5, Q7, bids, sorted_rows
from tests.router.fakes import ThreadInvoker

pytestmark = pytest.mark.timeout(120)

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc (Linux)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait(cond: Callable[[], bool], timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError("condition not met in time")
        time.sleep(0.05)


@pytest.fixture
def agent_cli(secret: bytes, tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Starts `python -m router.agent` on a given port with the embedded fleet; kills leftovers."""
    secret_file = tmp_path / "secret"
    secret_file.write_bytes(secret + b"\n")
    procs: list[subprocess.Popen[str]] = []

    def start(port: int, *extra: str) -> subprocess.Popen[str]:
        cmd = [sys.executable, "-m", "router.agent", "--port", str(port), "--secret-file", str(secret_file)]
        cmd += ["--invoker", "embedded", "--max-workers", "1", "--concurrency-limit", "2"]
        cmd += ["--worker-log", str(tmp_path / "w.log"), *extra]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout is not None
        hello = json.loads(proc.stdout.readline())
        assert hello["event"] == "listening" and hello["port"] == port
        return proc

    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _workers_of(pid: int) -> list[int]:
    """Pids of the embedded fleet's worker processes whose parent is `pid`."""
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and _ppid(int(entry)) == pid and _is_worker(int(entry)):
            out.append(int(entry))
    return out


def _ppid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _is_worker(pid: int) -> bool:
    """A live (not zombie) lambda_worker.local_runtime process: a zombie's cmdline is empty."""
    try:
        return b"lambda_worker.local_runtime" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


# An agent whose worker stalls every chunk for 60 s. The chunk must reach the worker, never the agent's
# local fallback: a cold worker on a loaded machine (CI's -n 3 lane) takes more than the default 2 s.
STALLING = (
    *("--inject", "slow-worker:share=1,delay=60s"),
    *("--chunk-timeout-s", "60"),
    *("--local-fallback-s", "60"),
)


def _stalled_chunk_in_flight(client: AgentClient, pool: ThreadPoolExecutor, data: pa.Table) -> Any:
    """Offload a chunk the agent stalls on its worker (slow-worker:share=1); returns its future."""
    future = pool.submit(client.offload, 1, 0, 0, Q7, data)
    _wait(lambda: client.stats()[stats.INJECTED_SLOW_WORKER] == 1)
    return future


@needs_proc
@pytest.mark.slow  # the agent as its own process
def test_workers_do_not_outlive_a_killed_agent(agent_cli, secret) -> None:  # type: ignore[no-untyped-def]
    port = _free_port()
    agent = agent_cli(port, *STALLING)
    with AgentClient(f"127.0.0.1:{port}", secret, retry_budget_s=0) as client, ThreadPoolExecutor(1) as pool:
        pending = _stalled_chunk_in_flight(client, pool, bids(2_000))
        workers = _workers_of(agent.pid)
        assert workers  # one process, asleep in the middle of a chunk
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        _wait(lambda: not any(_is_worker(pid) for pid in workers), timeout_s=5)
        with pytest.raises(OffloadError):
            pending.result(30)


@pytest.mark.slow  # the agent as its own process
def test_offload_survives_an_agent_restart_on_the_same_address(agent_cli, secret) -> None:  # type: ignore[no-untyped-def]
    port = _free_port()
    first = agent_cli(port, *STALLING)
    data = bids(5_000)
    want = sorted_rows(Q7.compile().run_table(data))
    with AgentClient(f"127.0.0.1:{port}", secret, retry_budget_s=60) as client, ThreadPoolExecutor(2) as pool:
        in_flight = _stalled_chunk_in_flight(client, pool, data)
        first.send_signal(signal.SIGKILL)
        first.wait(10)
        _wait(lambda: client.retries >= 1)  # the in-flight call saw the agent go and asks again
        again = pool.submit(client.offload, 1, 0, 1, Q7, data)  # made while no agent listens: it waits
        second = agent_cli(port)  # a new agent: it knows neither the program nor the chunks
        assert sorted_rows(in_flight.result(60).table) == want
        assert sorted_rows(again.result(60).table) == want
        assert client.retries >= 1
        s = client.stats()
        assert s[stats.CHUNKS_DONE] == 2 and s[stats.INJECTED_SLOW_WORKER] == 0
    second.send_signal(signal.SIGTERM)
    assert second.wait(30) == 0


def test_a_chunk_slower_than_the_call_timeout_is_collected_by_asking_again(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    # No worker can be had (every invoke is throttled), so the chunk runs in the agent after 1.5 s; each
    # call gives up after 0.5 s with the agent's "not done yet" and the next one joins the same chunk.
    # The first call always gives up (the chunk cannot be done before 1.5 s); how many more do depends
    # on how fast the machine is, so the count is only bounded below.
    agent = make_agent(ThreadInvoker(concurrency_limit=0), dispatch={"local_fallback_s": 1.5})
    data = bids(3_000)
    with AgentClient(agent.address, secret, timeout_s=0.5, retry_budget_s=30) as client:
        result = client.offload(1, 0, 0, Q5, data)
        s = client.stats()
    assert client.retries >= 1 and result.cached and result.ran_locally
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))
    assert s[stats.CHUNKS_SUBMITTED] == 1 and s[stats.CACHE_HITS] == client.retries


def test_program_errors_and_wrong_secrets_are_not_retried(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None)
    wrong = pa.table({"auction": [1, 2], "price": [3, 4]})  # no date_time column
    with AgentClient(agent.address, secret) as client:
        with pytest.raises(OffloadError) as info:
            client.offload(1, 0, 0, Q5, wrong)
        assert info.value.code == "INTERNAL" and client.retries == 0
    with AgentClient(agent.address, b"not-the-secret-at-all") as intruder:
        with pytest.raises(OffloadError) as info:
            intruder.offload(1, 0, 0, Q5, wrong)
        assert info.value.code == "UNAUTHENTICATED" and intruder.retries == 0


def test_with_no_agent_the_retries_end_with_the_budget(secret) -> None:  # type: ignore[no-untyped-def]
    address = f"127.0.0.1:{_free_port()}"  # nothing listens there
    started = time.monotonic()
    client = AgentClient(address, secret, timeout_s=0.3, retry_budget_s=1.5)
    with client, pytest.raises(OffloadError) as info:
        client.offload(1, 0, 0, Q5, bids(100))
    assert info.value.code in ("DEADLINE_EXCEEDED", "UNAVAILABLE") and client.retries >= 1
    # A bounded wait, the test's point: the client keeps asking until the budget is nearly spent (the last
    # try starts only if its backoff ends within the budget) and then gives up. The upper bound is 10x
    # the 1.5 s budget, room for a loaded machine.
    assert 1.2 < time.monotonic() - started < 15

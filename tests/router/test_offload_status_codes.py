"""What the client does with each way a real agent can fail a chunk: resend the spec, ask again, or raise.

Each case makes the in-process agent end an Offload with the status code under test and records, per
try, whether the request carried the program spec and how the try ended; the client's decision is
what the next try (or the raised error) shows.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pytest

from core.wire.arrow_ipc import encode
from router.client import RETRY_BACKOFF_S, AgentClient, OffloadError
from tests.router.conftest import Q5, Q7, bids, sorted_rows
from tests.router.fakes import ThreadInvoker

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class Try:
    with_spec: bool
    code: str  # "OK" or the status code's name
    started: float
    ended: float


class Recorder:
    """Wraps a client's Offload method and keeps one `Try` per call it makes."""

    def __init__(self, client: AgentClient) -> None:
        self.inner = client._stub.Offload
        self.tries: list[Try] = []
        self._lock = threading.Lock()
        client._stub.Offload = self

    def __call__(self, request: Any, **kwargs: Any) -> Any:
        started = time.monotonic()
        code = "OK"
        try:
            return self.inner(request, **kwargs)
        except Exception as e:
            code = e.code().name  # type: ignore[attr-defined]
            raise
        finally:
            with self._lock:
                self.tries.append(Try(bool(request.program), code, started, time.monotonic()))

    def codes(self) -> list[tuple[bool, str]]:
        return [(t.with_spec, t.code) for t in self.tries]


def test_an_agent_that_lost_the_program_gets_the_spec_again(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(None)
    data = bids(1_000)
    with AgentClient(agent.address, secret) as client:
        client._known.add(Q7.program_id)  # as after an agent restart: the client thinks it was sent
        calls = Recorder(client)
        result = client.offload(1, 0, 0, Q7, data)
    assert calls.codes() == [(False, "NOT_FOUND"), (True, "OK")]
    assert client.retries == 1 and result.rows_in == data.num_rows


def test_an_agent_that_went_away_is_asked_again_with_backoff_and_the_spec(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    # Every invoke is throttled and the local fallback is far off: the chunk waits in the first agent
    # until it stops (UNAVAILABLE); a new agent on the same port runs it.
    first = make_agent(ThreadInvoker(concurrency_limit=0), dispatch={"local_fallback_s": 60.0})
    data = bids(2_000)
    with AgentClient(first.address, secret, retry_budget_s=30) as client, ThreadPoolExecutor(1) as pool:
        client._known.add(Q5.program_id)  # the first try goes without the spec: the retry must add it
        first.programs.register(Q5.program_id, Q5.dumps())
        calls = Recorder(client)
        pending = pool.submit(client.offload, 1, 0, 0, Q5, data)
        deadline = time.monotonic() + 10
        while first.dispatcher.gauges()["chunks_pending"] < 1:
            assert time.monotonic() < deadline, "the chunk never reached the first agent"
            time.sleep(0.02)
        first.stop(grace_s=0.5)
        make_agent(None, agent={"port": first.port})
        result = pending.result(30)
    assert calls.tries[0].code == "UNAVAILABLE" and not calls.tries[0].with_spec
    assert calls.codes()[-1] == (True, "OK")
    assert all(t.with_spec for t in calls.tries[1:])
    assert calls.tries[1].started - calls.tries[0].ended >= RETRY_BACKOFF_S * 0.9
    assert client.retries == len(calls.tries) - 1 >= 1
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))


def test_a_chunk_not_done_yet_is_asked_for_again(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker(concurrency_limit=0), dispatch={"local_fallback_s": 1.0})
    with AgentClient(agent.address, secret, timeout_s=0.4, retry_budget_s=30) as client:
        calls = Recorder(client)
        result = client.offload(1, 0, 0, Q7, bids(1_000))
    codes = [code for _, code in calls.codes()]
    assert codes[-1] == "OK" and set(codes[:-1]) == {"DEADLINE_EXCEEDED"} and len(codes) >= 2
    assert result.cached and result.ran_locally


@pytest.mark.parametrize(
    ("case", "code", "error_type"),
    [
        ("spec that does not hash to the id", "INVALID_ARGUMENT", "ConfigError"),
        ("unknown program, no spec to send", "NOT_FOUND", "UnknownProgram"),
        ("program fails on the chunk", "INTERNAL", "ColumnNotFoundError"),
        ("wrong secret", "UNAUTHENTICATED", "WrongSecret"),
    ],
)
def test_what_asking_again_cannot_fix_is_raised_at_once(  # type: ignore[no-untyped-def]
    make_agent, secret, case: str, code: str, error_type: str
) -> None:
    agent = make_agent(None)
    data = bids(1_000)
    no_date_time = pa.table({"auction": [1, 2], "price": [3, 4]})
    with AgentClient(agent.address, b"not-the-secret-at-all" if case == "wrong secret" else secret) as client:
        calls = Recorder(client)
        request = client._pb2.OffloadRequest(epoch=1, program_id=Q7.program_id, payload=encode(data, "zstd"))
        with pytest.raises(OffloadError) as info:
            if case == "spec that does not hash to the id":
                request.program = Q5.dumps()
                client.offload_raw(request)
            elif case == "unknown program, no spec to send":
                client.offload_raw(request)
            elif case == "program fails on the chunk":
                client.offload(1, 0, 0, Q5, no_date_time)
            else:
                client.offload(1, 0, 0, Q7, data)
    assert (info.value.code, info.value.error_type) == (code, error_type)
    assert len(calls.tries) == 1 and client.retries == 0

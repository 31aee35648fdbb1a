"""Bad input at the agent's gRPC boundary: each is refused with a status that says what is wrong, and the
agent then serves a well-formed client as if nothing had happened.

The agent runs in-process (AgentServer) with workers in threads of the test process (the real handler,
the real protocol). Each bad input comes from a peer that speaks the protocol by hand: a worker whose
first message is not Hello, a worker of another session, a worker whose result is not Arrow, a Spark
task whose payload is not Arrow or whose program spec does not hash to the program id it names. After
each, a good offload must run on a worker and equal a local run, and the counters must show exactly the
refusal and the good chunk, nothing lost and nothing counted twice.
"""

from __future__ import annotations

import os
import queue
import threading
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pyarrow as pa
import pytest

from core.wire.arrow_ipc import checksum, decode, encode
from core.wire.build import build_id
from core.wire.protocol import PROTOCOL_VERSION, grpc_module, pb
from lambda_worker.handler import handler
from lambda_worker.program import ProgramSpec
from lambda_worker.session import SessionError
from router import stats
from router.agent.programs import UnknownProgram
from router.agent.server import AgentServer
from router.client import AgentClient, OffloadError
from router.invokers.base import InvokeHandle, InvokeResult
from tests.router.conftest import Q5, Q7, bids, sorted_rows
from tests.router.fakes import FakeContext, ThreadInvoker

pytestmark = pytest.mark.timeout(60)

Status = tuple[Any, str]  # (grpc.StatusCode, details) a refused call ended with


def _work(address: str, messages: list[Any]) -> Status:
    """Open a worker's stream, send `messages`, and return the status the agent ended it with."""
    grpc = grpc_module()
    _, agent_pb2_grpc = pb()
    with grpc.insecure_channel(address) as channel:
        call = agent_pb2_grpc.AgentStub(channel).Work(iter(messages), timeout=10)
        with pytest.raises(grpc.RpcError) as info:
            list(call)
    return info.value.code(), info.value.details()


def _hello(descriptor: Mapping[str, Any], **changes: Any) -> Any:
    agent_pb2, _ = pb()
    fields = {
        "session_id": descriptor["session_id"],
        "worker_id": descriptor["worker_id"],
        "secret": descriptor["secret"],
        "protocol_version": PROTOCOL_VERSION,
        "build": build_id(),
        **changes,
    }
    return agent_pb2.WorkerMessage(hello=agent_pb2.Hello(**fields))


class ImpostorFirst(ThreadInvoker):
    """Before its first worker runs, an impostor tries the agent with that worker's own id and token
    (`attempt` sends what it likes); then the real worker runs. So a refusal is shown not to cost the
    real worker its admission."""

    def __init__(self, attempt: Callable[[Mapping[str, Any]], Status]) -> None:
        super().__init__()
        self._attempt = attempt
        self.refusals: list[Status] = []

    def _run(self, descriptor: dict[str, Any], handle: InvokeHandle) -> None:
        if not self.refusals:
            self.refusals.append(self._attempt(descriptor))
        super()._run(descriptor, handle)


def _good_offload(agent: AgentServer, secret: bytes, chunk_seq: int = 0) -> Any:
    """A well-formed offload: it must run on a worker and equal the program run here."""
    data = bids(2_000, seed=chunk_seq + 1)
    with AgentClient(agent.address, secret, retry_budget_s=0) as client:
        result = client.offload(1, 0, chunk_seq, Q7, data)
    assert result.worker_id and not result.ran_locally and not result.cached
    assert sorted_rows(result.table) == sorted_rows(Q7.compile().run_table(data))
    return result


def _assert_one_clean_chunk(agent: AgentServer, **expected: int) -> None:
    """One chunk submitted and done on a worker, nothing failed, nothing else counted unless `expected`."""
    s = agent.stats()
    want = {
        stats.CHUNKS_SUBMITTED: 1,
        stats.CHUNKS_DONE: 1,
        stats.CHUNKS_FAILED: 0,
        stats.CHUNKS_RUN_LOCALLY: 0,
        stats.CORRUPT_RESULTS: 0,
        stats.LATE_RESULTS: 0,
        **expected,
    }
    assert {k: s[k] for k in want} == want
    assert s["chunks_pending"] == 0 and s["chunks_in_flight"] == 0


# ---- workers --------------------------------------------------------------------------------------


@pytest.mark.parametrize("first", ["result", "goodbye", "nothing"])
def test_a_worker_whose_first_message_is_not_hello_is_refused(make_agent, secret, first: str) -> None:  # type: ignore[no-untyped-def]
    agent_pb2, _ = pb()
    grpc = grpc_module()

    def not_hello(descriptor: Mapping[str, Any]) -> Status:
        messages = {
            # A result for chunk 1 (the one the real worker will be sent) must not be taken for it.
            "result": [agent_pb2.WorkerMessage(result=agent_pb2.Result(chunk_id=1, epoch=1, payload=b"x"))],
            "goodbye": [agent_pb2.WorkerMessage(goodbye=agent_pb2.Goodbye(reason="drained"))],
            "nothing": [],
        }[first]
        if messages:  # then the worker's real Hello, which must not be read after the bad first message
            messages.append(_hello(descriptor))
        return _work(descriptor["agent_address"], messages)

    invoker = ImpostorFirst(not_hello)
    agent = make_agent(invoker)
    result = _good_offload(agent, secret)
    ((code, details),) = invoker.refusals
    assert code == grpc.StatusCode.UNAUTHENTICATED
    said = "it sent no message" if first == "nothing" else f"its first message was {first}"
    assert details == f"a worker must say Hello first; {said}"
    assert result.worker_id == invoker.invocations[0]["worker_id"]  # the real worker was still admitted
    _assert_one_clean_chunk(agent, **{stats.REJECTED_WORKERS: 1, stats.WORKERS_CONNECTED: 1})


def test_a_worker_of_another_session_is_refused_with_the_reason(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()
    invoker = ImpostorFirst(lambda d: _work(d["agent_address"], [_hello(d, session_id="an-earlier-run")]))
    agent = make_agent(invoker)
    result = _good_offload(agent, secret)
    ((code, details),) = invoker.refusals
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert "belongs to session 'an-earlier-run'" in details and "the session that invoked it" in details
    assert agent.config.session_id not in details  # a refused peer learns nothing about this session
    assert result.worker_id == invoker.invocations[0]["worker_id"]
    _assert_one_clean_chunk(agent, **{stats.REJECTED_WORKERS: 1, stats.WORKERS_CONNECTED: 1})


def test_a_worker_invoked_for_another_session_fails_with_the_reason(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker())
    descriptor = {
        "session_id": "an-earlier-run",
        "agent_address": agent.address,
        "secret": "0" * 64,
        "worker_id": "w1",
        "idle_timeout_s": 1,
    }
    refusal = "UNAUTHENTICATED: worker 'w1' belongs to session 'an-earlier-run'"
    with pytest.raises(SessionError, match=refusal):
        handler(descriptor, FakeContext(10))
    _good_offload(agent, secret)
    _assert_one_clean_chunk(agent, **{stats.REJECTED_WORKERS: 1, stats.WORKERS_CONNECTED: 1})


def test_bytes_that_are_no_worker_message_end_that_stream_only(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    grpc = grpc_module()

    def garbage(descriptor: Mapping[str, Any]) -> Status:
        with grpc.insecure_channel(descriptor["agent_address"]) as channel:
            raw = channel.stream_stream("/sponge.agent.Agent/Work")  # bytes in, bytes out: no protobuf
            with pytest.raises(grpc.RpcError) as info:
                list(raw(iter([b"\xff\xfe not a protobuf message"]), timeout=10))
        return info.value.code(), info.value.details()

    invoker = ImpostorFirst(garbage)
    agent = make_agent(invoker)
    result = _good_offload(agent, secret)
    ((code, _details),) = invoker.refusals
    assert code == grpc.StatusCode.INTERNAL  # gRPC's own answer to a request it cannot deserialize
    assert result.worker_id == invoker.invocations[0]["worker_id"]
    _assert_one_clean_chunk(agent, **{stats.WORKERS_CONNECTED: 1})


GARBAGE: dict[str, Callable[[bytes], bytes]] = {
    "random bytes": lambda good: os.urandom(256),
    "text": lambda good: b"this is not an Arrow IPC stream",
    "a cut stream": lambda good: good[: len(good) // 2],
    "a schema, then junk": lambda good: good[:200] + os.urandom(300),
    "nothing": lambda good: b"",
}


class GarbageFirstWorker(ThreadInvoker):
    """Its one worker speaks the protocol by hand: it answers its first chunk with `garbage` (with a
    checksum that matches, so only reading the payload can tell), then every chunk correctly."""

    def __init__(self, garbage: Callable[[bytes], bytes], rows_lie: int = 0) -> None:
        super().__init__()
        self._garbage = garbage
        self.rows_lie = rows_lie  # added to the records it says it read, with its garbage
        self.garbage_sent = 0
        self.answered = 0

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        handle = InvokeHandle(str(descriptor["worker_id"]))
        with self._lock:
            self.invocations.append(dict(descriptor))
        threading.Thread(target=self._serve, args=(dict(descriptor), handle), daemon=True).start()
        return handle

    def _answer(self, chunk: Any) -> Any:
        agent_pb2, _ = pb()
        good = encode(ProgramSpec.loads(chunk.program).compile().run_table(decode(chunk.payload)))
        payload = good
        rows = decode(chunk.payload).num_rows
        if self.garbage_sent == 0:
            payload = self._garbage(good)
            rows += self.rows_lie
            self.garbage_sent += 1
        else:
            self.answered += 1
        result = agent_pb2.Result(
            chunk_id=chunk.chunk_id,
            epoch=chunk.epoch,
            payload=payload,
            rows_in=rows,
            checksum=checksum(payload),
        )
        return agent_pb2.WorkerMessage(result=result)

    def _serve(self, descriptor: dict[str, Any], handle: InvokeHandle) -> None:
        grpc = grpc_module()
        agent_pb2, agent_pb2_grpc = pb()
        outbox: queue.Queue[Any] = queue.Queue()
        outbox.put(_hello(descriptor))

        def requests() -> Iterator[Any]:
            while (msg := outbox.get()) is not None:
                yield msg

        with grpc.insecure_channel(descriptor["agent_address"]) as channel:
            call = agent_pb2_grpc.AgentStub(channel).Work(requests(), timeout=30)
            try:
                for msg in call:
                    if msg.WhichOneof("kind") != "chunk":
                        break
                    outbox.put(self._answer(msg.chunk))
            except grpc.RpcError:
                pass
            finally:
                outbox.put(agent_pb2.WorkerMessage(goodbye=agent_pb2.Goodbye(reason="drained")))
                outbox.put(None)
        handle.set_result(InvokeResult(True, {"garbage_sent": self.garbage_sent}))


@pytest.mark.parametrize("kind", list(GARBAGE))
def test_a_result_that_is_not_arrow_is_redone_and_never_cached(make_agent, secret, kind: str) -> None:  # type: ignore[no-untyped-def]
    invoker = GarbageFirstWorker(GARBAGE[kind])
    agent = make_agent(invoker, max_workers=1)
    data = bids(2_000)
    with AgentClient(agent.address, secret, retry_budget_s=0) as client:
        first = client.offload(1, 0, 0, Q5, data)
        retry = client.offload(1, 0, 0, Q5, data)  # a retried task: served from the cache
    expected = sorted_rows(Q5.compile().run_table(data))
    assert sorted_rows(first.table) == expected and first.redispatches == 1
    assert retry.cached and sorted_rows(retry.table) == expected  # the cache holds the good result
    assert invoker.garbage_sent == 1 and invoker.answered == 1
    s = agent.stats()
    assert s[stats.CORRUPT_RESULTS] == 1 and s[stats.CHUNKS_REDISPATCHED] == 1
    assert s[stats.RECORDS_OFFLOADED] == data.num_rows  # counted once, for the good result only
    _assert_one_clean_chunk(
        agent, **{stats.CORRUPT_RESULTS: 1, stats.CHUNKS_REDISPATCHED: 1, stats.CACHE_HITS: 1}
    )


WRONG: dict[str, tuple[Callable[[bytes], bytes], int]] = {
    "another program's columns": (lambda good: encode(pa.table({"auction": [1], "total": [2.0]})), 0),
    "no rows at all": (lambda good: encode(decode(good).slice(0, 0).drop_columns(["num_bids"])), 0),
    "a count of records it did not read": (lambda good: good, 7),
}


@pytest.mark.parametrize("kind", list(WRONG))
def test_a_result_the_program_could_not_have_made_is_rejected_redone_and_never_cached(  # type: ignore[no-untyped-def]
    make_agent, secret, kind: str
) -> None:
    invoker = GarbageFirstWorker(*WRONG[kind])
    agent = make_agent(invoker, max_workers=1)
    data = bids(2_000)
    with AgentClient(agent.address, secret, retry_budget_s=0) as client:
        first = client.offload(1, 0, 0, Q5, data)
        retry = client.offload(1, 0, 0, Q5, data)
    expected = sorted_rows(Q5.compile().run_table(data))
    assert sorted_rows(first.table) == expected and first.redispatches == 1
    assert retry.cached and sorted_rows(retry.table) == expected  # the cache holds the good result
    # The worker that answered wrongly was drained; a new one did the chunk again.
    assert invoker.garbage_sent == 1 and invoker.answered == 1 and len(invoker.invocations) == 2
    assert first.worker_id == invoker.invocations[1]["worker_id"]
    _assert_one_clean_chunk(
        agent, **{stats.REJECTED_RESULTS: 1, stats.CHUNKS_REDISPATCHED: 1, stats.CACHE_HITS: 1}
    )


# ---- Spark tasks ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", [k for k in GARBAGE if k != "a cut stream"])
def test_an_offload_whose_payload_is_not_arrow_is_refused_at_the_door(make_agent, secret, kind: str) -> None:  # type: ignore[no-untyped-def]
    agent_pb2, _ = pb()
    agent = make_agent(ThreadInvoker())
    payload = GARBAGE[kind](encode(bids(2_000)))
    bad = agent_pb2.OffloadRequest(epoch=1, program_id=Q7.program_id, program=Q7.dumps(), payload=payload)
    with AgentClient(agent.address, secret, retry_budget_s=5) as client:
        with pytest.raises(OffloadError) as info:
            client.offload_raw(bad)
        assert client.retries == 0  # INVALID_ARGUMENT: asking again cannot help
    assert info.value.code == "INVALID_ARGUMENT" and info.value.error_type == "InputError"
    assert "payload is not an Arrow IPC stream" in str(info.value)
    assert agent.stats()[stats.CHUNKS_SUBMITTED] == 0 and agent.stats()[stats.WORKERS_STARTED] == 0
    _good_offload(agent, secret)  # the same key (1, 0, 0, Q7): nothing of the bad call was kept
    _assert_one_clean_chunk(agent)


def test_an_offload_whose_stream_is_cut_after_its_schema_fails_that_chunk_only(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    """The door reads a payload's schema only (reading every chunk whole would cost the agent more than
    dispatching it): a stream cut after its schema reaches a worker, fails there and again in the
    agent's local run, and ends as that chunk's failure with the reason, not retried."""
    agent_pb2, _ = pb()
    agent = make_agent(ThreadInvoker())
    payload = GARBAGE["a cut stream"](encode(bids(2_000)))
    bad = agent_pb2.OffloadRequest(epoch=1, program_id=Q7.program_id, program=Q7.dumps(), payload=payload)
    with AgentClient(agent.address, secret, retry_budget_s=5) as client:
        with pytest.raises(OffloadError) as info:
            client.offload_raw(bad)
        assert client.retries == 0
    assert info.value.code == "INTERNAL" and info.value.error_type == "InputError"
    assert "payload is not an Arrow IPC stream" in str(info.value)
    _good_offload(agent, secret)  # the same key: a failure is not cached
    s = agent.stats()
    assert s[stats.CHUNKS_SUBMITTED] == 2 and s[stats.CHUNKS_DONE] == 1 and s[stats.CHUNKS_FAILED] == 1
    assert s[stats.WORKER_FAILURES] == 1 and s[stats.CHUNKS_RUN_LOCALLY] == 1  # the local run is the arbiter
    assert s["chunks_pending"] == 0 and s["chunks_in_flight"] == 0


@pytest.mark.parametrize(
    "spec",
    [
        pytest.param(Q5.dumps(), id="another program's spec"),
        pytest.param(ProgramSpec("q7", Q7.node_ids, window_size_s=20).dumps(), id="other params"),
        pytest.param("{not json", id="not JSON"),
        pytest.param('{"query": "q7"}', id="no node ids"),
    ],
)
def test_a_program_spec_that_does_not_hash_to_its_id_is_refused(make_agent, secret, spec: str) -> None:  # type: ignore[no-untyped-def]
    agent_pb2, _ = pb()
    agent = make_agent(ThreadInvoker())
    payload = encode(bids(2_000, seed=1))
    bad = agent_pb2.OffloadRequest(epoch=1, program_id=Q7.program_id, program=spec, payload=payload)
    with AgentClient(agent.address, secret, retry_budget_s=5) as client:
        with pytest.raises(OffloadError) as info:
            client.offload_raw(bad)
        assert client.retries == 0
    assert info.value.code == "INVALID_ARGUMENT" and info.value.error_type == "ConfigError"
    assert "program spec" in str(info.value)
    with pytest.raises(UnknownProgram):  # the bad spec was registered under no id
        agent.programs.register(Q7.program_id, "")
    assert agent.stats()[stats.CHUNKS_SUBMITTED] == 0
    _good_offload(agent, secret)
    _assert_one_clean_chunk(agent)


def test_a_mismatched_spec_names_both_ids_and_what_to_send(make_agent, secret) -> None:  # type: ignore[no-untyped-def]
    agent_pb2, _ = pb()
    agent = make_agent(None)
    bad = agent_pb2.OffloadRequest(
        epoch=1, program_id=Q7.program_id, program=Q5.dumps(), payload=encode(pa.table({"x": [1]}))
    )
    with AgentClient(agent.address, secret, retry_budget_s=0) as client, pytest.raises(OffloadError) as info:
        client.offload_raw(bad)
    message = str(info.value)
    assert f"program spec hashes to {Q5.program_id}, not {Q7.program_id}" in message
    assert "send ProgramSpec.program_id together with ProgramSpec.dumps()" in message

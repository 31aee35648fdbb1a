"""Bad input on the worker's side of its stream: a chunk the worker cannot run is answered with a Failure
that names what is wrong, and the worker goes on serving the chunks after it.

The agent here is a scripted gRPC servicer in the test process: it takes the worker's Hello, sends its
chunks one at a time (each answered before the next is sent), then drains the worker. The worker is the
real WorkerSession, dialing it over a real channel.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent import futures
from typing import Any

import pytest

from core.nexmark.generator import GeneratorConfig, generate
from core.wire.arrow_ipc import checksum, decode, encode
from core.wire.descriptor import SessionDescriptor
from core.wire.protocol import grpc_module, pb
from lambda_worker.program import ProgramCache, ProgramSpec
from lambda_worker.session import WorkerSession
from tests.router.fakes import FakeContext

pytestmark = pytest.mark.timeout(60)

Q7 = ProgramSpec("q7", ("key_by1", "window_aggregate2"))
OTHER = ProgramSpec("q5", ("map1", "key_by2", "window_aggregate3"))


def _scripted_agent(chunks: list[dict[str, Any]], received: list[Any]) -> Any:
    """A servicer whose Work stream sends `chunks` and records every message the worker sends."""
    agent_pb2, agent_pb2_grpc = pb()

    class Scripted(agent_pb2_grpc.AgentServicer):  # type: ignore[misc,name-defined]
        def Work(self, request_iterator: Iterator[Any], context: Any) -> Iterator[Any]:
            received.append(next(request_iterator))
            for i, fields in enumerate(chunks, start=1):
                yield agent_pb2.AgentMessage(chunk=agent_pb2.Chunk(chunk_id=i, epoch=7, **fields))
                received.append(next(request_iterator))
            yield agent_pb2.AgentMessage(drain=agent_pb2.Drain(reason="script over"))
            received.extend(request_iterator)  # the worker's Goodbye, then its half-close

    return Scripted()


def _serve(chunks: list[dict[str, Any]]) -> tuple[Any, list[Any]]:
    """Run one worker session against the scripted agent; (its summary, what it sent)."""
    grpc = grpc_module()
    _, agent_pb2_grpc = pb()
    received: list[Any] = []
    server = grpc.server(futures.ThreadPoolExecutor(2))
    agent_pb2_grpc.add_AgentServicer_to_server(_scripted_agent(chunks, received), server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    try:
        descriptor = SessionDescriptor(
            session_id="s1", agent_address=f"127.0.0.1:{port}", secret="t", worker_id="w1", idle_timeout_s=10
        )
        session = WorkerSession(
            descriptor, FakeContext(30), ProgramCache(), cold_start=True, init_seconds=0.0
        )
        summary = session.run()
    finally:
        server.stop(0)
    return summary, received


def test_chunks_the_worker_cannot_run_fail_with_the_reason_and_the_next_one_runs() -> None:
    data = encode(generate(GeneratorConfig(seed=1, events=3_000), "bid", 0, 3_000))
    summary, received = _serve(
        [
            # Before the worker knows Q7: a spec is checked against the id it comes under.
            {"program_id": Q7.program_id, "program": OTHER.dumps(), "payload": data},
            {"program_id": "p0123456789abcdef", "program": "", "payload": data},
            {"program_id": Q7.program_id, "program": "{not json", "payload": data},
            # Q7 compiles (and is kept) before each of these payloads fails to read.
            {"program_id": Q7.program_id, "program": Q7.dumps(), "payload": b"not an Arrow IPC stream"},
            {"program_id": Q7.program_id, "program": Q7.dumps(), "payload": data[: len(data) // 2]},
            {"program_id": Q7.program_id, "program": Q7.dumps(), "payload": data},
        ]
    )
    hello, *answers, goodbye = received
    assert hello.WhichOneof("kind") == "hello" and goodbye.WhichOneof("kind") == "goodbye"
    *failures, result = answers
    got = [(f.failure.chunk_id, f.failure.error_type, f.failure.message) for f in failures]
    assert [(chunk_id, error_type) for chunk_id, error_type, _ in got] == [
        (1, "ConfigError"),
        (2, "ConfigError"),
        (3, "ConfigError"),
        (4, "InputError"),
        (5, "InputError"),
    ]
    messages = [message for _, _, message in got]
    assert messages[0] == f"program spec hashes to {OTHER.program_id}, not {Q7.program_id}"
    assert messages[1] == "unknown program 'p0123456789abcdef' and no spec came with it"
    assert messages[2].startswith("program spec is not valid JSON")
    assert messages[3].startswith("payload is not an Arrow IPC stream")
    assert messages[4].startswith("payload is not an Arrow IPC stream")

    r = result.result  # the good chunk after five bad ones runs as if they never came
    assert (r.chunk_id, r.epoch, r.checksum) == (6, 7, checksum(r.payload))
    expected = Q7.compile().run_table(decode(data))
    assert sorted(decode(r.payload).to_pylist(), key=repr) == sorted(expected.to_pylist(), key=repr)
    assert (summary.reason, summary.chunks, summary.failures) == ("drained", 1, 5)
    assert summary.rows_in == decode(data).num_rows

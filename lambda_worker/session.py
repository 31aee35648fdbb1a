"""A worker's session with the VM agent: dial out, take chunks, leave cleanly.

Why the worker dials out: Lambda functions cannot accept inbound connections (paper challenge C2),
so the worker opens one bidirectional gRPC stream to the agent and pulls work over it. It leaves on
its own when drained, when idle for `idle_timeout_s`, or when the function's remaining time drops
below the safety margin, always with a Goodbye so the agent re-dispatches nothing by surprise.
A chunk that raises is answered with a Failure carrying the exception's class and message, so the
VM never sees a bare EOF for a program error.

Everything heavy (grpc, pyarrow, polars) is imported when a session starts, never at module import.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from core.wire.descriptor import SessionDescriptor
from lambda_worker.program import ProgramCache, ProgramSpec


class LambdaContext(Protocol):
    aws_request_id: str

    def get_remaining_time_in_millis(self) -> int: ...


class SessionError(RuntimeError):
    """The agent could not be reached or refused us; the message carries gRPC's status and details."""


@dataclass(frozen=True)
class ChunkFaults:
    """Failure injection for the embedded fleet's tests only: the local runtime sets it, AWS never does."""

    delay_s: float = 0.0  # sleep this long in every chunk (a slow worker)
    crash_in_chunk: int = 0  # crash the process (os._exit) while processing this chunk number (1-based)
    stall_s: float = 0.0  # hang this long before dialing, deaf to the deadline (a stuck worker)


@dataclass
class SessionSummary:
    worker_id: str
    reason: str = ""
    chunks: int = 0
    failures: int = 0
    rows_in: int = 0
    rows_out: int = 0
    compute_s: float = 0.0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return dict(self.__dict__)


_END = object()


class WorkerSession:
    """One invocation's session. `run()` returns when the worker leaves and reports what it did."""

    def __init__(
        self,
        descriptor: SessionDescriptor,
        context: LambdaContext,
        programs: ProgramCache,
        *,
        cold_start: bool,
        init_seconds: float,
        faults: ChunkFaults = ChunkFaults(),
    ) -> None:
        self.d = descriptor
        self.context = context
        self.programs = programs
        self.cold_start = cold_start
        self.init_seconds = init_seconds
        self.faults = faults
        self.summary = SessionSummary(descriptor.worker_id)

    def _tls(self) -> Any:
        """The TLS the descriptor asks for (the run's CA, and this worker's certificate with mutual
        TLS), or None for a plaintext agent."""
        from core.wire.protocol import ChannelTls

        d = self.d
        if d.tls_ca is None:
            return None
        cert, key = (d.tls_cert.encode(), d.tls_key.encode()) if d.tls_cert and d.tls_key else (None, None)
        return ChannelTls(d.tls_ca.encode(), cert, key)

    def _remaining_s(self) -> float:
        return self.context.get_remaining_time_in_millis() / 1000.0 - self.d.safety_margin_s

    def run(self) -> SessionSummary:
        from core.wire.build import build_id
        from core.wire.protocol import CHANNEL_OPTIONS, PROTOCOL_VERSION, grpc_module, open_channel, pb

        if self.d.protocol_version != PROTOCOL_VERSION:
            raise SessionError(
                f"the agent speaks protocol {self.d.protocol_version}, this worker {PROTOCOL_VERSION}: "
                "deploy the same build to the VMs and to Lambda"
            )
        grpc = grpc_module()
        agent_pb2, agent_pb2_grpc = pb()
        started = time.monotonic()
        if self.faults.stall_s:
            time.sleep(self.faults.stall_s)
        if self.d.program is not None:
            self.programs.get(ProgramSpec.from_json(self.d.program))  # compile before dialing
        outbox: queue.Queue[Any] = queue.Queue()
        inbox: queue.Queue[Any] = queue.Queue()
        outbox.put(
            agent_pb2.WorkerMessage(
                hello=agent_pb2.Hello(
                    session_id=self.d.session_id,
                    worker_id=self.d.worker_id,
                    secret=self.d.secret,
                    cold_start=self.cold_start,
                    protocol_version=PROTOCOL_VERSION,
                    init_seconds=self.init_seconds + (time.monotonic() - started),
                    build=build_id(),
                )
            )
        )

        def requests() -> Iterator[Any]:
            while True:
                msg = outbox.get()
                if msg is _END:
                    return
                yield msg

        # No gRPC compression: payloads are Arrow IPC with zstd buffers already, and gzip over them
        # cost more CPU than the whole program on a Q1 chunk (bench/offload.py).
        channel = open_channel(self.d.agent_address, CHANNEL_OPTIONS, self._tls())
        stub = agent_pb2_grpc.AgentStub(channel)
        # The stream's own deadline ends it before Lambda would kill us mid-stream.
        call = stub.Work(requests(), timeout=max(self._remaining_s(), 0.5), wait_for_ready=False)
        errors: list[Exception] = []

        def read() -> None:
            try:
                for msg in call:
                    inbox.put(msg)
            except grpc.RpcError as e:
                errors.append(e)
            finally:
                inbox.put(_END)

        reader = threading.Thread(target=read, name="agent-reader", daemon=True)
        reader.start()
        try:
            self.summary.reason = self._serve(agent_pb2, inbox, outbox)
        finally:
            outbox.put(
                agent_pb2.WorkerMessage(goodbye=agent_pb2.Goodbye(reason=self.summary.reason or "error"))
            )
            outbox.put(_END)
            reader.join(timeout=2.0)  # the agent ends the stream once it has read our half-close
            call.cancel()
            channel.close()
            self.summary.seconds = time.monotonic() - started
        if errors and self.summary.reason == "closed":
            self._raise_for(grpc, errors[0])
        return self.summary

    def _raise_for(self, grpc: Any, error: Exception) -> None:
        """Turn the stream's final status into the session's outcome: a refusal is an error, not a goodbye."""
        code = error.code() if hasattr(error, "code") else None
        details = error.details() if hasattr(error, "details") else str(error)
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            self.summary.reason = "deadline"
            return
        refused = (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.FAILED_PRECONDITION,
            grpc.StatusCode.PERMISSION_DENIED,
        )
        if code in refused or (code == grpc.StatusCode.UNAVAILABLE and self.summary.chunks == 0):
            name = code.name if code is not None else "ERROR"
            raise SessionError(f"agent {self.d.agent_address}: {name}: {details}")
        self.summary.reason = "lost"

    def _serve(self, agent_pb2: Any, inbox: queue.Queue[Any], outbox: queue.Queue[Any]) -> str:
        last_work = time.monotonic()
        while True:
            remaining = self._remaining_s()
            if remaining <= 0:
                return "deadline"
            idle_left = self.d.idle_timeout_s - (time.monotonic() - last_work)
            if idle_left <= 0:
                return "idle"
            try:
                msg = inbox.get(timeout=max(0.0, min(remaining, idle_left)))
            except queue.Empty:
                continue
            if msg is _END:
                return "closed"
            kind = msg.WhichOneof("kind")
            if kind == "drain":
                return "drained"
            if kind == "chunk":
                outbox.put(self._process(agent_pb2, msg.chunk))
                last_work = time.monotonic()

    def _process(self, agent_pb2: Any, chunk: Any) -> Any:
        from core.wire.arrow_ipc import checksum, decode, encode

        number = self.summary.chunks + self.summary.failures + 1
        t0 = time.perf_counter()
        try:
            if self.faults.crash_in_chunk == number:
                import os

                os._exit(137)
            if self.faults.delay_s:
                time.sleep(self.faults.delay_s)
            if chunk.delay_s > 0:
                # The agent's `--inject slow-worker`: stall like a stuck worker (deaf to the stream and the
                # deadline), so the agent's chunk timeout or the function timeout has to recover the chunk.
                time.sleep(chunk.delay_s)
            cpu0 = time.process_time()
            program = self.programs.get_json(chunk.program_id, chunk.program)
            table = decode(chunk.payload)
            rows_by_node: dict[str, int] = {}
            out = program.run_table(table, rows_by_node)
            payload = encode(out, self.d.compression)
            cpu_seconds = time.process_time() - cpu0
        except Exception as e:  # any program error goes back as data, with its class and message
            self.summary.failures += 1
            return agent_pb2.WorkerMessage(
                failure=agent_pb2.Failure(
                    chunk_id=chunk.chunk_id, error_type=type(e).__name__, message=str(e)
                )
            )
        seconds = time.perf_counter() - t0
        self.summary.chunks += 1
        records = program.records_in(table)
        self.summary.rows_in += records
        self.summary.rows_out += out.num_rows
        self.summary.compute_s += seconds
        return agent_pb2.WorkerMessage(
            result=agent_pb2.Result(
                chunk_id=chunk.chunk_id,
                epoch=chunk.epoch,
                payload=payload,
                rows_in=records,
                rows_out=out.num_rows,
                checksum=checksum(payload),
                seconds=seconds,
                rows_by_node=rows_by_node,
                cpu_seconds=cpu_seconds,
            )
        )

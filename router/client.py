"""The VM side's handle on the agent: what a Spark task calls to offload one chunk.

Why a client class: a task must present the session secret, reuse one channel for all its chunks,
and get the agent's errors back as exceptions that keep the program's error class and message
(`OffloadError.error_type`), never as a bare transport error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from core.errors import SpongeError
from lambda_worker.arrow_ipc import checksum, decode, encode
from lambda_worker.program import ProgramSpec
from router.protocol import CHANNEL_OPTIONS, SECRET_METADATA, grpc_module, pb


class OffloadError(SpongeError):
    """The agent could not produce the chunk's result; `error_type` names the failure's class."""

    def __init__(self, message: str, *, error_type: str, code: str) -> None:
        super().__init__(message)
        self.error_type = error_type
        self.code = code


@dataclass(frozen=True)
class OffloadResult:
    table: pa.Table
    worker_id: str
    ran_locally: bool
    redispatches: int
    cached: bool
    rows_in: int
    rows_out: int
    payload_bytes: int


class AgentClient:
    def __init__(
        self, address: str, secret: bytes, *, timeout_s: float = 120.0, compression: str = "zstd"
    ) -> None:
        grpc = grpc_module()
        _, agent_pb2_grpc = pb()
        self._grpc = grpc
        self._pb2, _ = pb()
        self._channel = grpc.insecure_channel(address, options=CHANNEL_OPTIONS)
        self._stub = agent_pb2_grpc.AgentStub(self._channel)
        self._metadata = ((SECRET_METADATA, secret.decode()),)
        self.timeout_s = timeout_s
        self.compression = compression
        self._known: set[str] = set()

    def offload(
        self,
        epoch: int,
        partition: int,
        chunk_seq: int,
        program: ProgramSpec,
        data: pa.Table | pa.RecordBatch,
        *,
        timeout_s: float | None = None,
    ) -> OffloadResult:
        """Run `data` through `program` on the fleet (or in the agent); the same key gives the same answer."""
        pid = program.program_id
        request = self._pb2.OffloadRequest(
            epoch=epoch,
            partition=partition,
            chunk_seq=chunk_seq,
            program_id=pid,
            payload=encode(data, self.compression),
            program="" if pid in self._known else program.dumps(),
        )
        reply = self._call(self._stub.Offload, request, timeout_s)
        self._known.add(pid)
        if checksum(reply.payload) != reply.checksum:
            raise OffloadError(
                "the agent's reply failed its checksum", error_type="CorruptReply", code="DATA_LOSS"
            )
        return OffloadResult(
            decode(reply.payload),
            reply.worker_id,
            reply.ran_locally,
            reply.redispatches,
            reply.cached,
            reply.rows_in,
            reply.rows_out,
            len(reply.payload),
        )

    def offload_raw(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send a prepared OffloadRequest (benchmarks reuse one encoded payload)."""
        return self._call(self._stub.Offload, request, timeout_s)

    def stats(self) -> dict[str, Any]:
        reply = self._call(self._stub.Stats, self._pb2.StatsRequest(), 10.0)
        out: dict[str, Any] = dict(reply.counters)
        out.update(
            workers_connected=reply.workers_connected,
            workers_starting=reply.workers_starting,
            chunks_pending=reply.chunks_pending,
            chunks_in_flight=reply.chunks_in_flight,
            session_id=reply.session_id,
        )
        return out

    def _call(self, method: Any, request: Any, timeout_s: float | None) -> Any:
        try:
            return method(request, timeout=timeout_s or self.timeout_s, metadata=self._metadata)
        except self._grpc.RpcError as e:
            trailing = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            error_type = trailing.get("x-sponge-error-type", code)
            details = e.details() if hasattr(e, "details") else str(e)
            raise OffloadError(
                f"offload failed ({code}): {details}", error_type=error_type, code=code
            ) from None

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> AgentClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

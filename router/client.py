"""The VM side's handle on the agent: what a Spark task calls to offload one chunk.

Why a client class: a task must present the session secret, reuse one channel for all its chunks,
and get the agent's errors back as exceptions that keep the program's error class and message
(`OffloadError.error_type`), never as a bare transport error.

Why `offload` retries: Offload is idempotent per (epoch, partition, chunk_seq, program_id), and each
way it can end that asking again fixes has its own status code (all codes are listed at `Offload` in
core/wire/agent.proto): the agent is gone or restarting (UNAVAILABLE; with wait_for_ready a call made
while it is down waits for it, and a wait past the deadline shows as DEADLINE_EXCEEDED), the chunk is
not done yet (DEADLINE_EXCEEDED from the agent), the agent is serving as many calls as it has threads
(RESOURCE_EXHAUSTED: its backpressure), or the agent does not know the program (NOT_FOUND: it
restarted since the spec was sent). So it asks again, with capped exponential backoff, until
`retry_budget_s` is spent, and sends the spec along after UNAVAILABLE or NOT_FOUND. Any other code is
raised at once. The decision reads the status code only, never the message, so rewording an error
cannot change what the client does.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from core.errors import ConfigError, SpongeError
from core.wire.arrow_ipc import checksum, decode, encode
from core.wire.protocol import (
    CHANNEL_OPTIONS,
    ERROR_TYPE_METADATA,
    SECRET_METADATA,
    ChannelTls,
    grpc_module,
    open_channel,
    pb,
    read_credentials,
)
from lambda_worker.program import ProgramSpec

RETRY_BACKOFF_S = 0.1
"""First pause before a retry; it doubles per retry up to RETRY_BACKOFF_CAP_S."""
RETRY_BACKOFF_CAP_S = 5.0
RETRIED_CODES = frozenset({"UNAVAILABLE", "DEADLINE_EXCEEDED", "NOT_FOUND", "RESOURCE_EXHAUSTED"})
"""Status codes `offload` asks again after (NOT_FOUND only when it has the spec to send)."""
PROGRAM_FORGOTTEN_CODES = frozenset({"UNAVAILABLE", "NOT_FOUND"})
"""Status codes after which the agent may not know any program: the next try sends the spec."""
RECONNECT_OPTIONS: list[tuple[str, Any]] = [
    # gRPC's default reconnect backoff grows from 1 s to 120 s: a call waiting for a restarted agent
    # would sit idle long after it is back. An agent restart takes seconds; re-dial at least every 1 s.
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]


class OffloadError(SpongeError):
    """The agent could not produce the chunk's result; `error_type` names the failure's class, `code` is
    the gRPC status code's name (what a caller decides on)."""

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
    """`timeout_s`: how long one Offload call may wait for its chunk; `retry_budget_s`: how long
    `offload` keeps asking again (see the module doc) before it raises the last error. `retries`
    counts the calls made again, over the client's life. With `tls` the channel is TLS and trusts only
    the run's CA (core/wire/run_pki.py), presenting the run's client certificate with mutual TLS;
    without it, plaintext.
    """

    def __init__(
        self,
        address: str,
        secret: bytes,
        *,
        timeout_s: float = 120.0,
        compression: str = "zstd",
        retry_budget_s: float = 300.0,
        tls: ChannelTls | None = None,
    ) -> None:
        if not timeout_s > 0:
            raise ConfigError(f"timeout_s must be positive, got {timeout_s}")
        if not retry_budget_s >= 0:
            raise ConfigError(f"retry_budget_s must be >= 0, got {retry_budget_s}", hint="0 never retries")
        grpc = grpc_module()
        _, agent_pb2_grpc = pb()
        self._grpc = grpc
        self._pb2, _ = pb()
        self._channel = open_channel(address, CHANNEL_OPTIONS + RECONNECT_OPTIONS, tls)
        self._stub = agent_pb2_grpc.AgentStub(self._channel)
        self._metadata = ((SECRET_METADATA, secret.decode()),)
        self.timeout_s = timeout_s
        self.compression = compression
        self.retry_budget_s = retry_budget_s
        self.retries = 0
        self._lock = threading.Lock()
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
        sink_file: str = "",
    ) -> OffloadResult:
        """Run `data` through `program` on the fleet (or in the agent); the same key gives the same answer.

        Survives an agent restart and a slow chunk by asking again (module doc); `timeout_s` overrides
        the client's per-call timeout. With `sink_file` the agent writes the output there
        (core/direct_sink.py) and the result's table is empty.
        """
        pid = program.program_id
        payload = encode(data, self.compression)

        def request() -> Any:  # built per attempt: after a restart the spec must go along again
            return self._pb2.OffloadRequest(
                epoch=epoch,
                partition=partition,
                chunk_seq=chunk_seq,
                program_id=pid,
                payload=payload,
                program="" if pid in self._known else program.dumps(),
                sink_file=sink_file,
                rows=data.num_rows,
            )

        reply = self._retrying(self._stub.Offload, request, timeout_s, resendable=True)
        self._known.add(pid)
        if checksum(reply.payload) != reply.checksum:
            raise OffloadError(
                "the agent's reply failed its checksum", error_type="CorruptReply", code="DATA_LOSS"
            )
        return OffloadResult(
            decode(reply.payload) if reply.payload else pa.table({}),
            reply.worker_id,
            reply.ran_locally,
            reply.redispatches,
            reply.cached,
            reply.rows_in,
            reply.rows_out,
            len(reply.payload),
        )

    def offload_raw(self, request: Any, timeout_s: float | None = None) -> Any:
        """Send a prepared OffloadRequest (benchmarks reuse one encoded payload), retried like `offload`
        except that a request without the program spec cannot be fixed after an agent restart."""
        return self._retrying(self._stub.Offload, lambda: request, timeout_s, resendable=False)

    # ---- keyed stages (docs/adr/0024) ----

    def stash(self, entity: str, start: int, end: int, seq: int, records: pa.Table) -> None:
        """Keep a chunk's records (with their key group) at the agent; asking twice is harmless."""
        ref = self._pb2.ChunkRef(entity=entity, start=start, end=end, seq=seq)
        payload = encode(records, self.compression)
        self._retrying(
            self._stub.Stash, lambda: self._pb2.StashRequest(chunk=ref, payload=payload), None, False
        )

    def seal(
        self,
        program: ProgramSpec,
        groups: list[tuple[int, int, bool]],
        parts: list[tuple[str, int, int, int]],
        moved: pa.Table | None,
        forwarded: pa.Table | None,
        watermark_ms: int,
    ) -> tuple[pa.Table, str, bool]:
        """Run a batch of key groups, each (group, version, fresh), on a worker; (the answer, the
        worker's id, whether the agent ran it)."""
        request = self._pb2.SealRequest(
            program=program.dumps(),
            groups=[self._pb2.GroupVersion(group=g, version=v, fresh=f) for g, v, f in groups],
            parts=self._refs(parts),
            moved=encode(moved, self.compression) if moved is not None else b"",
            forwarded=encode(forwarded, self.compression) if forwarded is not None else b"",
            watermark_ms=watermark_ms,
        )
        reply = self._retrying(self._stub.Seal, lambda: request, None, False)
        return decode(reply.payload), reply.worker_id, reply.ran_locally

    def touched(
        self, program: ProgramSpec, groups: list[int], parts: list[tuple[str, int, int, int]]
    ) -> pa.Table:
        """The keys the stashed records of `groups` in `parts` are of."""
        request = self._pb2.TouchedRequest(program=program.dumps(), groups=groups, parts=self._refs(parts))
        return decode(self._retrying(self._stub.Touched, lambda: request, None, False).payload)

    def _refs(self, parts: list[tuple[str, int, int, int]]) -> list[Any]:
        return [self._pb2.ChunkRef(entity=e, start=a, end=b, seq=q) for e, a, b, q in parts]

    def warm(self, program: ProgramSpec) -> int:
        """Have the agent and its idle workers compile and run a keyed program once; how many workers
        warmed with it."""
        request = self._pb2.WarmRequest(program=program.dumps())
        return int(self._retrying(self._stub.Warm, lambda: request, None, False).warmed)

    def release(self, keep: int, reason: str = "") -> int:
        """Drain the agent's idle workers beyond `keep` connected; how many it told to leave."""
        request = self._pb2.ReleaseRequest(keep=keep, reason=reason)
        return int(self._call(self._stub.Release, request, 10.0).drained)

    def hand_back(self, program: ProgramSpec, group: int, version: int) -> pa.Table:
        request = self._pb2.HandBackRequest(program=program.dumps(), group=group, version=version)
        return decode(self._retrying(self._stub.HandBack, lambda: request, None, False).payload)

    def _retrying(
        self, method: Any, request: Callable[[], Any], timeout_s: float | None, resendable: bool
    ) -> Any:
        """Call `method` until it answers, a retry cannot help, or the budget is spent.

        A try starts only within `retry_budget_s` of the first, and none runs past the later of the
        budget's end and the first try's deadline: a budget of 0 means one plain call. `resendable`:
        `request` adds the program spec when it is not in `_known`, so NOT_FOUND can be fixed.
        """
        timeout = timeout_s or self.timeout_s
        started = time.monotonic()
        retry_until = started + self.retry_budget_s
        end = max(retry_until, started + timeout)
        backoff = RETRY_BACKOFF_S
        # Hand-written: grpc's retryPolicy resends the same request; after NOT_FOUND it must carry the spec.
        while True:
            attempt_s = max(0.001, min(timeout, end - time.monotonic()))
            try:
                return self._call(method, request(), attempt_s, wait_for_ready=True)
            except OffloadError as e:
                if e.code in PROGRAM_FORGOTTEN_CODES:
                    self._known.clear()  # a new agent knows no program: send the spec with the next try
                retry = e.code in RETRIED_CODES and (resendable or e.code != "NOT_FOUND")
                if not retry or time.monotonic() + backoff >= retry_until:
                    raise
            with self._lock:
                self.retries += 1
            time.sleep(backoff)
            backoff = min(2 * backoff, RETRY_BACKOFF_CAP_S)

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

    def _call(self, method: Any, request: Any, timeout_s: float | None, wait_for_ready: bool = False) -> Any:
        try:
            return method(
                request,
                timeout=timeout_s or self.timeout_s,
                metadata=self._metadata,
                wait_for_ready=wait_for_ready,
            )
        except self._grpc.RpcError as e:
            trailing = dict(e.trailing_metadata() or ()) if hasattr(e, "trailing_metadata") else {}
            code = e.code().name if hasattr(e, "code") else "UNKNOWN"
            error_type = trailing.get(ERROR_TYPE_METADATA, code)
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


_shared: dict[tuple[str, str], AgentClient] = {}
_shared_lock = threading.Lock()


def shared_client(address: str, secret_file: str, timeout_s: float) -> AgentClient:
    """One client (one gRPC channel) per agent per process, reused by every task and processor call."""
    key = (address, secret_file)
    with _shared_lock:
        if key not in _shared:
            secret, tls = read_credentials(secret_file)
            _shared[key] = AgentClient(address, secret, timeout_s=timeout_s, tls=tls)
        return _shared[key]

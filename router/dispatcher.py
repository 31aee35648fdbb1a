"""Chunks and workers: who runs what, and what happens when a worker goes away.

Why the agent keeps every chunk until its result is in (upstream backup, as in Es-Stream): a Lambda
worker can be throttled, time out, crash or lose its connection at any moment, and nothing may be
lost or counted twice because of it. So a chunk is *dispatched* to one connected worker at a time
and stays owned by the dispatcher; it is resolved exactly once, by the first of:

* a Result from the worker it is currently assigned to (a late Result from a worker it was taken
  away from is dropped: that is what makes re-dispatch duplicate-free);
* a local run in the agent, when no worker took it within `local_fallback_s`, when it has been
  dispatched `max_dispatches` times, or when a worker reported a Failure (the local run is the
  arbiter: a program error fails again locally and is returned with its class and message).

A worker that disconnects, or holds a chunk past `chunk_timeout_s`, loses the chunk to the front of
the queue and (on timeout) its stream. The dispatcher knows nothing of gRPC: a worker is a
`WorkerLink` that can be sent a chunk or closed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import threading
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future, InvalidStateError, ThreadPoolExecutor
from dataclasses import dataclass, field

from core.errors import ConfigError, SpongeError
from core.wire.arrow_ipc import checksum
from router import stats

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Refusal:
    """Why a worker's result is refused: `corrupt` (it does not read as Arrow: lost on the way, like a
    failed checksum) or not (it reads, but is not what the chunk's program makes)."""

    reason: str
    corrupt: bool = False


DEFAULT_LOCAL_FALLBACK_S = 2.0
"""How long a chunk waits for a worker before the agent runs it itself: a warm worker takes one at
once, so only a cold start or a fleet at its limit waits this long."""

DEFAULT_CHUNK_TIMEOUT_S = 10.0
"""How long a worker may hold a chunk before the agent takes it back and gives it to another: a
chunk's work is well under a second, so a worker this late has stalled; a stall costs this long."""


@dataclass(frozen=True)
class DispatchConfig:
    chunk_timeout_s: float = DEFAULT_CHUNK_TIMEOUT_S
    local_fallback_s: float = DEFAULT_LOCAL_FALLBACK_S
    max_dispatches: int = 3
    local_threads: int = 1

    def __post_init__(self) -> None:
        if not self.chunk_timeout_s > 0:
            raise ConfigError(f"chunk_timeout_s must be positive, got {self.chunk_timeout_s}")
        if not self.local_fallback_s >= 0:
            raise ConfigError(f"local_fallback_s must be >= 0, got {self.local_fallback_s}")
        if self.max_dispatches < 1 or self.local_threads < 1:
            raise ConfigError("max_dispatches and local_threads must be >= 1")


class ChunkFailed(SpongeError):
    """The program failed on a chunk; `error_type` is the exception's class name where it ran."""

    def __init__(self, error_type: str, message: str) -> None:
        super().__init__(f"{error_type}: {message}")
        self.error_type = error_type
        self.detail = message


@dataclass(frozen=True)
class ChunkOutcome:
    payload: bytes
    worker_id: str
    ran_locally: bool
    redispatches: int
    rows_in: int
    rows_out: int
    checksum: int


@dataclass(eq=False)
class ChunkTask:
    chunk_id: int
    epoch: int
    program_id: str
    program_json: str
    payload: bytes
    future: Future[ChunkOutcome] = field(default_factory=Future)
    dispatches: int = 0
    redispatches: int = 0
    waiting_since: float = 0.0
    deadline: float = 0.0
    worker_id: str | None = None
    worker_error: tuple[str, str] | None = None
    # Whether a worker's result (payload, the records it says it read) is what the chunk's program
    # makes (router/agent/result_check.py): None, or why not; a refused result is redone, never cached.
    check: Callable[[bytes, int], Refusal | None] | None = None


class WorkerLink(ABC):
    """A connected, authenticated worker as the dispatcher sees it."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self.current: ChunkTask | None = None
        self.retiring = False

    @abstractmethod
    def send_chunk(self, task: ChunkTask) -> None: ...

    @abstractmethod
    def send_drain(self, reason: str) -> None: ...

    @abstractmethod
    def close(self) -> None:
        """End the worker's stream (it will see the stream close and leave)."""


RunLocal = Callable[[ChunkTask], ChunkOutcome]


class Dispatcher:
    def __init__(self, config: DispatchConfig, counters: stats.Counters, run_local: RunLocal) -> None:
        self.config = config
        self.counters = counters
        self._run_local = run_local
        self._lock = threading.Lock()
        self._pending: deque[ChunkTask] = deque()
        self._inflight: dict[int, ChunkTask] = {}
        self._workers: dict[str, WorkerLink] = {}
        self._idle: deque[str] = deque()
        self._pool = ThreadPoolExecutor(config.local_threads, thread_name_prefix="local-chunk")
        self._closed = False

    # ---- chunks ----

    def submit(self, task: ChunkTask) -> Future[ChunkOutcome]:
        with self._lock:
            if self._closed:
                task.future.set_exception(ChunkFailed("AgentStopping", "the agent is shutting down"))
                return task.future
            self.counters.add(stats.CHUNKS_SUBMITTED)
            task.waiting_since = time.monotonic()
            self._pending.append(task)
            self._pump()
            if self.config.local_fallback_s == 0 and self._pending and self._pending[-1] is task:
                self._pending.pop()  # no waiting allowed: do not wait for the next tick either
                self._go_local(task)
        return task.future

    def _pump(self) -> None:
        now = time.monotonic()
        while self._pending and self._idle:
            link = self._workers.get(self._idle.popleft())
            if link is None or link.retiring or link.current is not None:
                continue
            task = self._pending.popleft()
            task.dispatches += 1
            task.worker_id = link.worker_id
            task.deadline = now + self.config.chunk_timeout_s
            self._inflight[task.chunk_id] = task
            link.current = task
            self.counters.add(stats.CHUNKS_DISPATCHED)
            link.send_chunk(task)

    def _requeue(self, task: ChunkTask) -> None:
        """Take a chunk back from its worker; it goes first in line, or home after too many tries."""
        task.worker_id = None
        if task.dispatches >= self.config.max_dispatches:
            self._go_local(task)
            return
        task.redispatches += 1
        self.counters.add(stats.CHUNKS_REDISPATCHED)
        task.waiting_since = time.monotonic()
        self._pending.appendleft(task)

    def _go_local(self, task: ChunkTask) -> None:
        self.counters.add(stats.CHUNKS_RUN_LOCALLY)
        self._pool.submit(self._local, task)

    def _local(self, task: ChunkTask) -> None:
        try:
            outcome = self._run_local(task)
        except Exception as e:
            self.counters.add(stats.CHUNKS_FAILED)
            _fail(task, ChunkFailed(type(e).__name__, str(e)))
            return
        # Counted before the future resolves (a waiter may read the counters at once); a chunk sent home
        # is in no queue any more, so nothing else can resolve it: counted exactly once.
        self.counters.add(stats.CHUNKS_DONE)
        self.counters.add(stats.RECORDS_RUN_LOCALLY, outcome.rows_in)
        _resolve(task, outcome)

    # ---- workers ----

    def attach(self, link: WorkerLink) -> None:
        with self._lock:
            self._workers[link.worker_id] = link
            self._idle.append(link.worker_id)
            self._pump()

    def retire(self, worker_id: str) -> None:
        """The worker said goodbye: give it nothing more (its current chunk, if any, may still come back)."""
        with self._lock:
            link = self._workers.get(worker_id)
            if link is not None:
                link.retiring = True

    def drain_idle(self, keep: int, reason: str) -> int:
        """Tell idle workers to leave until at most `keep` stay connected; how many were told. A worker
        busy with a chunk is never drained: it finishes, and a later call may drain it."""
        with self._lock:
            staying = [link for link in self._workers.values() if not link.retiring]
            idle = [link for link in staying if link.current is None]
            drained = idle[: max(0, len(staying) - max(keep, 0))]
            for link in drained:
                link.retiring = True  # _pump gives it nothing more
        for link in drained:
            link.send_drain(reason)
        return len(drained)

    def detach(self, worker_id: str) -> None:
        """The worker's stream ended: whatever it held goes back to the queue."""
        with self._lock:
            link = self._workers.pop(worker_id, None)
            if link is None:
                return
            task = link.current
            link.current = None
            if task is not None and self._inflight.get(task.chunk_id) is task:
                del self._inflight[task.chunk_id]
                self._requeue(task)
            self._pump()

    def _owned(self, worker_id: str, chunk_id: int) -> tuple[WorkerLink, ChunkTask] | None:
        link = self._workers.get(worker_id)
        task = self._inflight.get(chunk_id)
        if link is None or task is None or link.current is not task:
            self.counters.add(stats.LATE_RESULTS)
            return None
        del self._inflight[chunk_id]
        link.current = None
        if not link.retiring:
            self._idle.append(worker_id)
        return link, task

    def on_result(
        self,
        worker_id: str,
        chunk_id: int,
        epoch: int,
        payload: bytes,
        rows_in: int,
        rows_out: int,
        crc: int,
        *,
        readable: bool = True,
        rows_by_node: Mapping[str, int] | None = None,
        cpu_seconds: float = 0.0,
    ) -> None:
        """A worker's result. `readable=False`: the receiver found the payload is no result at all (this
        class reads no payloads); like one that fails its checksum, it is counted corrupt and redone.
        `rows_by_node`: the records the worker ran through each node of the chain; `cpu_seconds`: the
        worker's CPU time on the chunk (`Result.cpu_seconds`). Both count only for the result that
        resolves the chunk: a late, duplicate or corrupt one did work nobody uses."""
        intact = readable and checksum(payload) == crc
        with self._lock:
            owned = self._owned(worker_id, chunk_id)
            if owned is None:
                return
            link, task = owned
            if epoch != task.epoch or not intact:
                self.counters.add(stats.CORRUPT_RESULTS)
                self._requeue(task)
                self._pump()
                return
        # Out of the lock (it reads the payload); the chunk is out of flight, so only this call has it.
        refused = task.check(payload, rows_in) if task.check is not None else None
        with self._lock:
            if refused is not None:
                logger.warning(
                    "worker %s: result of chunk %d refused, redone: %s", worker_id, chunk_id, refused.reason
                )
                if refused.corrupt:
                    self.counters.add(stats.CORRUPT_RESULTS)
                else:  # its code is not ours, or broken: it gets nothing more, and is asked to leave
                    self.counters.add(stats.REJECTED_RESULTS)
                    link.retiring = True
                    with contextlib.suppress(ValueError):
                        self._idle.remove(worker_id)
                    link.send_drain("its result was rejected")
                self._requeue(task)
                self._pump()
                return
            outcome = ChunkOutcome(payload, worker_id, False, task.redispatches, rows_in, rows_out, crc)
            # _owned took the chunk out of flight under the lock: only this call resolves it.
            self.counters.add(stats.CHUNKS_DONE)
            self.counters.add(stats.RECORDS_OFFLOADED, rows_in)
            for node_id, n in (rows_by_node or {}).items():
                self.counters.add(stats.operator_offloaded(node_id), n)
            self.counters.add(stats.WORKER_CPU_US, _microseconds(cpu_seconds))
            self._pump()
        _resolve(task, outcome)

    def on_failure(self, worker_id: str, chunk_id: int, error_type: str, message: str) -> None:
        with self._lock:
            owned = self._owned(worker_id, chunk_id)
            if owned is None:
                return
            _, task = owned
            self.counters.add(stats.WORKER_FAILURES)
            task.worker_error = (error_type, message)
            self._go_local(task)
            self._pump()

    # ---- time ----

    def tick(self) -> None:
        """Take chunks back from workers past their deadline; run chunks locally that waited too long."""
        to_close: list[WorkerLink] = []
        now = time.monotonic()
        with self._lock:
            for task in [t for t in self._inflight.values() if now > t.deadline]:
                self.counters.add(stats.CHUNK_TIMEOUTS)
                del self._inflight[task.chunk_id]
                link = self._workers.get(task.worker_id or "")
                if link is not None:
                    link.current = None
                    link.retiring = True
                    to_close.append(link)
                self._requeue(task)
            waited = [t for t in self._pending if now - t.waiting_since >= self.config.local_fallback_s]
            for task in waited:
                self._pending.remove(task)
                self._go_local(task)
            self._pump()
        for link in to_close:
            link.close()

    # ---- views ----

    def demand(self) -> tuple[int, int, ChunkTask | None]:
        """(workers wanted: one per waiting or running chunk, workers connected, a waiting chunk)."""
        with self._lock:
            head = self._pending[0] if self._pending else None
            return len(self._pending) + len(self._inflight), len(self._workers), head

    def workers(self) -> list[tuple[str, int | None]]:
        """(worker id, chunk id it holds or None) of every connected worker, in connection order."""
        with self._lock:
            return [
                (wid, link.current.chunk_id if link.current is not None else None)
                for wid, link in self._workers.items()
            ]

    def gauges(self) -> dict[str, int]:
        with self._lock:
            return {
                "workers_connected": len(self._workers),
                "chunks_pending": len(self._pending),
                "chunks_in_flight": len(self._inflight),
            }

    def close(self, reason: str = "agent stopping") -> None:
        with self._lock:
            self._closed = True
            links = list(self._workers.values())
            tasks = list(self._pending) + list(self._inflight.values())
            self._pending.clear()
            self._inflight.clear()
        for link in links:
            link.send_drain(reason)
            link.close()
        for task in tasks:
            _fail(task, ChunkFailed("AgentStopping", reason))
        self._pool.shutdown(wait=True, cancel_futures=False)


def _microseconds(seconds: float) -> int:
    """A worker's reported seconds as whole microseconds; what no clock can measure (negative, NaN, inf:
    a broken or hostile worker) counts as none rather than poisoning the sum."""
    return round(seconds * 1_000_000) if math.isfinite(seconds) and seconds > 0 else 0


def _resolve(task: ChunkTask, outcome: ChunkOutcome) -> None:
    if not task.future.done():
        with contextlib.suppress(InvalidStateError):  # failed meanwhile by close()
            task.future.set_result(outcome)


def _fail(task: ChunkTask, error: BaseException) -> None:
    if not task.future.done():
        with contextlib.suppress(InvalidStateError):  # resolved meanwhile: the result stands
            task.future.set_exception(error)

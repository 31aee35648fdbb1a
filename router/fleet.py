"""Starting workers: how many, with what descriptor, and who may connect.

Why separate from dispatching: the dispatcher only sees connected workers; this module turns its
demand (one worker per waiting or running chunk, capped by `max_workers` and the backend's
concurrency limit) into invocations, counts what the backend says (started, throttled, failed),
backs off after a throttle instead of hammering the API, and remembers which worker ids it invoked
so that only those may connect (a Hello from any other id is refused even with a valid token).

Why a worker refused for its build stops the starts for a while: the deployed function runs other
sources than the agent, so every worker it starts will be refused too. Starting the next one as soon
as the last one's invocation ends made hundreds of paid invocations a minute, each refused; instead
the fleet starts none for `refused_backoff_s` (the agent runs the chunks itself meanwhile), then tries
again, in case the function was redeployed.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from core.wire.descriptor import SessionDescriptor
from core.wire.protocol import PROTOCOL_VERSION, worker_token
from router import stats
from router.invokers.base import InvokeFailed, InvokeHandle, Invoker, Throttled


@dataclass(frozen=True)
class FleetConfig:
    """`start_timeout_s`: an invoked worker that has not connected by then stops counting as capacity.
    `admission_s`: how long its id stays admissible (at least the function timeout).
    `refused_backoff_s`: no worker is started for that long after one was refused for its build."""

    max_workers: int = 4
    start_timeout_s: float = 15.0
    throttle_backoff_s: float = 0.5
    idle_timeout_s: float = 10.0
    safety_margin_s: float = 2.0
    admission_s: float = 900.0
    refused_backoff_s: float = 30.0
    compression: str = "zstd"

    def __post_init__(self) -> None:
        if (
            isinstance(self.max_workers, bool)
            or not isinstance(self.max_workers, int)
            or self.max_workers < 0
        ):
            raise ConfigError(f"max_workers must be a non-negative integer, got {self.max_workers!r}")
        for name in (
            "start_timeout_s",
            "throttle_backoff_s",
            "idle_timeout_s",
            "safety_margin_s",
            "admission_s",
            "refused_backoff_s",
        ):
            if getattr(self, name) < 0:
                raise ConfigError(f"{name} must be >= 0, got {getattr(self, name)}")


class FleetManager:
    def __init__(
        self,
        invoker: Invoker | None,
        config: FleetConfig,
        *,
        session_id: str,
        session_secret: bytes,
        agent_address: str,
        counters: stats.Counters,
        tls_ca: str | None = None,
        issue_cert: Callable[[str], tuple[str, str]] | None = None,
    ) -> None:
        self.invoker = invoker
        self.config = config
        self.session_id = session_id
        self._secret = session_secret
        self.agent_address = agent_address
        self.tls_ca = tls_ca  # the CA workers trust when the agent speaks TLS
        self._issue_cert = issue_cert  # mutual TLS: a worker's own client certificate and key
        self.counters = counters
        self._lock = threading.Lock()
        self._starting: dict[str, float] = {}  # invoked, not yet connected: id -> invoke time
        self._admissible: dict[str, float] = {}  # may still connect: id -> invoke time
        self._connected: set[str] = set()
        self._backoff_until = 0.0
        self._ids = itertools.count(1)
        self.handles: dict[str, InvokeHandle] = {}
        self.startups: deque[tuple[bool, float]] = deque(maxlen=1024)
        """(cold start?, seconds from invoke to the worker's Hello) of recent workers."""

    def descriptor(self, worker_id: str, program: Mapping[str, Any] | None) -> SessionDescriptor:
        cert, key = self._issue_cert(worker_id) if self._issue_cert is not None else (None, None)
        return SessionDescriptor(
            session_id=self.session_id,
            agent_address=self.agent_address,
            secret=worker_token(self._secret, self.session_id, worker_id),
            worker_id=worker_id,
            idle_timeout_s=self.config.idle_timeout_s,
            safety_margin_s=self.config.safety_margin_s,
            program=program,
            protocol_version=PROTOCOL_VERSION,
            compression=self.config.compression,
            tls_ca=self.tls_ca,
            tls_cert=cert,
            tls_key=key,
        )

    def want(self, wanted: int, program: Mapping[str, Any] | None = None) -> int:
        """Invoke workers until connected + starting covers `wanted` (within the caps); returns how many."""
        if self.invoker is None:
            return 0
        now = time.monotonic()
        with self._lock:
            if now < self._backoff_until:
                return 0
            # Not capped by the backend's concurrency_limit: that budget is shared with the agents of
            # other VM hosts (and other functions), so only a throttle says it is used up right now.
            missing = min(wanted, self.config.max_workers) - len(self._connected) - len(self._starting)
            ids = [f"{self.session_id[:8]}-w{next(self._ids):04d}" for _ in range(max(0, missing))]
            for wid in ids:
                self._starting[wid] = now
                self._admissible[wid] = now
        started = 0
        for i, wid in enumerate(ids):
            try:
                handle = self.invoker.invoke_async(self.descriptor(wid, program).to_event())
            except (Throttled, InvokeFailed) as e:
                self._invoke_refused(ids[i:], e)
                break
            self.counters.add(stats.WORKERS_STARTED)
            started += 1
            with self._lock:
                self.handles[wid] = handle
            handle.add_done_callback(self._invocation_over)
        return started

    def _invoke_refused(self, ids: list[str], error: Exception) -> None:
        with self._lock:
            for wid in ids:
                self._starting.pop(wid, None)
                self._admissible.pop(wid, None)
            if isinstance(error, Throttled):
                self._backoff_until = time.monotonic() + self.config.throttle_backoff_s
        self.counters.add(stats.THROTTLES if isinstance(error, Throttled) else stats.INVOKE_FAILURES)

    def _invocation_over(self, handle: InvokeHandle) -> None:
        error = handle.exception()
        finished = error is not None or handle.result().finished
        if isinstance(error, Throttled):  # a synchronous invoke refused at the concurrency limit (429)
            self.counters.add(stats.WORKERS_STARTED, -1)  # counted when invoked; no worker started
            self._invoke_refused([handle.worker_id], error)
        elif error is not None:
            self.counters.add(stats.INVOKE_FAILURES)
        if finished:
            with self._lock:
                self._starting.pop(handle.worker_id, None)
                self._admissible.pop(handle.worker_id, None)
                self.handles.pop(handle.worker_id, None)

    def admit(self, worker_id: str, cold_start: bool = False) -> bool:
        """True (once) for a worker this fleet invoked and that has not connected yet, while fewer than
        `max_workers` are connected: one that stopped counting as starting (its start timed out) and
        was replaced may still dial in late, and must not take the fleet past its cap."""
        with self._lock:
            if worker_id not in self._admissible or worker_id in self._connected:
                return False
            if len(self._connected) >= self.config.max_workers:
                self._starting.pop(worker_id, None)
                del self._admissible[worker_id]
                return False
            self._starting.pop(worker_id, None)
            invoked = self._admissible.pop(worker_id)
            self._connected.add(worker_id)
            self.startups.append((cold_start, time.monotonic() - invoked))
            return True

    def refused(self, worker_id: str) -> None:
        """Worker `worker_id`, which this fleet invoked, was refused for the build it runs: start no
        worker for `refused_backoff_s` (see the module doc)."""
        with self._lock:
            self._starting.pop(worker_id, None)
            self._admissible.pop(worker_id, None)
            until = time.monotonic() + self.config.refused_backoff_s
            self._backoff_until = max(self._backoff_until, until)

    def gone(self, worker_id: str) -> None:
        with self._lock:
            self._connected.discard(worker_id)

    def tick(self) -> None:
        now = time.monotonic()
        with self._lock:
            for wid, t in list(self._starting.items()):
                if now - t > self.config.start_timeout_s:
                    del self._starting[wid]
            for wid, t in list(self._admissible.items()):
                if now - t > self.config.admission_s:
                    del self._admissible[wid]

    @property
    def starting(self) -> int:
        with self._lock:
            return len(self._starting)

"""The contract between the VM agent and a Lambda fleet: invoke a worker, learn how it went.

Why so small: the agent must run the same way on the embedded fleet, on LocalStack and on AWS, so a
backend fills in three things (`invoke_async`, `concurrency_limit`, `close`; `kill`, for fault
injection, is optional) and reports outcomes in two error classes every backend maps its own failures
to. `Throttled` means "no capacity now, try later" (Lambda's 429 TooManyRequestsException, a
reserved concurrency reached); `InvokeFailed` means the invocation itself went wrong (a function
error, a timeout, a crash, a missing function).
A backend is chosen once, at the edge, by name (router/invokers/__init__.py); this module names none.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from core.errors import SpongeError


class Throttled(SpongeError):
    """The fleet has no capacity for another concurrent worker right now."""


class InvokeFailed(SpongeError):
    """The invocation failed: `error_type` is the function's error class or the backend's reason."""

    def __init__(self, message: str, *, error_type: str = "InvokeFailed", hint: str = "") -> None:
        super().__init__(message, hint=hint)
        self.error_type = error_type


@dataclass(frozen=True)
class InvokeResult:
    """How an invocation ended.

    `finished` is True when the function has run to its end (a synchronous invoke), False when the
    backend only knows it was accepted (an asynchronous "Event" invoke): then the worker's session,
    not this result, tells the agent when it is over.
    """

    finished: bool
    payload: Mapping[str, Any] | None = None
    status_code: int = 200
    seconds: float = 0.0


class InvokeHandle:
    """The future outcome of one invocation; callbacks run once it is known (in the backend's thread)."""

    def __init__(self, worker_id: str) -> None:
        self.worker_id = worker_id
        self._future: Future[InvokeResult] = Future()
        self._lock = threading.Lock()

    def done(self) -> bool:
        return self._future.done()

    def result(self, timeout: float | None = None) -> InvokeResult:
        """The outcome; raises Throttled or InvokeFailed, or TimeoutError if not known in `timeout` s."""
        return self._future.result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        return self._future.exception(timeout)

    def add_done_callback(self, fn: Callable[[InvokeHandle], None]) -> None:
        self._future.add_done_callback(lambda _f: fn(self))

    # ---- for backends ----

    def set_result(self, result: InvokeResult) -> None:
        with self._lock:
            if not self._future.done():
                self._future.set_result(result)

    def set_exception(self, error: BaseException) -> None:
        with self._lock:
            if not self._future.done():
                self._future.set_exception(error)


class Invoker(ABC):
    """A Lambda fleet. Implementations must be thread-safe."""

    @property
    @abstractmethod
    def concurrency_limit(self) -> int:
        """How many workers may run at once (the function's reserved or account concurrency)."""

    @abstractmethod
    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        """Start one worker with `descriptor` as its event; returns at once.

        May raise Throttled (or InvokeFailed) right away when the backend knows synchronously;
        otherwise the handle reports the outcome.
        """

    @abstractmethod
    def close(self) -> None:
        """Release the backend's resources (processes, threads, connections); idempotent."""

    # ---- optional: fault injection ----

    @property
    def can_kill(self) -> bool:
        """Whether `kill` can reach a worker's process. Why optional: only a backend that owns its
        execution environments (the embedded fleet) can; on AWS the agent cannot SIGKILL a Lambda."""
        return False

    def kill(self, worker_id: str) -> bool:
        """SIGKILL the execution environment running `worker_id`'s invocation (`--inject kill-worker`).

        True if a process was killed; False when there is none now or the backend cannot (see can_kill).
        """
        return False

    def __enter__(self) -> Invoker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

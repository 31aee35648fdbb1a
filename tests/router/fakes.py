"""Test doubles for the router: an in-process invoker running the real handler, and a fake worker link."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Mapping
from typing import Any

from router.dispatcher import ChunkTask, WorkerLink
from router.invokers.base import InvokeFailed, InvokeHandle, Invoker, InvokeResult, Throttled


class FakeContext:
    """Lambda's context object with a real deadline."""

    def __init__(self, timeout_s: float, function_name: str = "sponge-worker") -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = 1769
        self.aws_request_id = str(uuid.uuid4())
        self.log_group_name = "test"
        self.log_stream_name = "test"
        self._deadline = time.monotonic() + timeout_s

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.monotonic()) * 1000))


class ThreadInvoker(Invoker):
    """Runs lambda_worker.handler.handler in a thread of the test process: the real protocol, no processes."""

    def __init__(self, concurrency_limit: int = 4, timeout_s: float = 30.0) -> None:
        self._limit = concurrency_limit
        self.timeout_s = timeout_s
        self._lock = threading.Lock()
        self.running = 0
        self.invocations: list[dict[str, Any]] = []
        self.results: list[Any] = []

    @property
    def concurrency_limit(self) -> int:
        return self._limit

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        with self._lock:
            if self.running >= self._limit:
                raise Throttled("all concurrent executions in use")
            self.running += 1
            self.invocations.append(dict(descriptor))
        handle = InvokeHandle(str(descriptor.get("worker_id", "")))
        threading.Thread(target=self._run, args=(dict(descriptor), handle), daemon=True).start()
        return handle

    def _run(self, descriptor: dict[str, Any], handle: InvokeHandle) -> None:
        from lambda_worker.handler import handler

        try:
            out = handler(descriptor, FakeContext(self.timeout_s))
            self.results.append(out)
            handle.set_result(InvokeResult(True, out))
        except Exception as e:
            self.results.append(e)
            handle.set_exception(InvokeFailed(str(e), error_type=type(e).__name__))
        finally:
            with self._lock:
                self.running -= 1

    def close(self) -> None:
        pass


class FakeLink(WorkerLink):
    def __init__(self, worker_id: str) -> None:
        super().__init__(worker_id)
        self.sent: list[ChunkTask] = []
        self.drained: list[str] = []
        self.closed = False

    def send_chunk(self, task: ChunkTask) -> None:
        self.sent.append(task)

    def send_drain(self, reason: str) -> None:
        self.drained.append(reason)

    def close(self) -> None:
        self.closed = True

"""Results by chunk key, so a retried Spark task gets the same answer without recomputation.

Why single-flight and bounded: Spark re-runs a failed or speculative task with the same input, so
the same (epoch, partition, chunk_seq, program_id) can arrive twice, even while the first attempt is
still running. Both must get one computation's answer (the agent stays idempotent and the worker
fleet does not pay twice). Completed entries are evicted least-recently-used beyond `max_bytes`;
an evicted key is simply recomputed, which is still correct because a program is a pure function
of its chunk. Failures are not kept: a retry of a failed chunk computes again.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, order=True)
class ChunkKey:
    epoch: int
    partition: int
    chunk_seq: int
    program_id: str


class ResultCache:
    def __init__(self, max_bytes: int, size_of: Callable[[Any], int]) -> None:
        self.max_bytes = max_bytes
        self._size_of = size_of
        self._lock = threading.Lock()
        self._done: OrderedDict[ChunkKey, tuple[Any, int]] = OrderedDict()
        self._running: dict[ChunkKey, Future[Any]] = {}
        self._bytes = 0

    def lookup_or_claim(self, key: ChunkKey) -> tuple[Future[Any], bool]:
        """(future of the key's outcome, True if the caller must compute it and resolve the future)."""
        with self._lock:
            if key in self._done:
                self._done.move_to_end(key)
                f: Future[Any] = Future()
                f.set_result(self._done[key][0])
                return f, False
            if key in self._running:
                return self._running[key], False
            f = Future()
            self._running[key] = f
            f.add_done_callback(lambda fut: self._finish(key, fut))
            return f, True

    def _finish(self, key: ChunkKey, fut: Future[Any]) -> None:
        with self._lock:
            self._running.pop(key, None)
            if fut.cancelled() or fut.exception() is not None:
                return
            value = fut.result()
            size = self._size_of(value)
            if size > self.max_bytes:
                return
            self._done[key] = (value, size)
            self._bytes += size
            while self._bytes > self.max_bytes and self._done:
                _, (_, evicted) = self._done.popitem(last=False)
                self._bytes -= evicted

    def contains(self, key: ChunkKey) -> bool:
        with self._lock:
            return key in self._done

    @property
    def nbytes(self) -> int:
        with self._lock:
            return self._bytes

    def __len__(self) -> int:
        with self._lock:
            return len(self._done)

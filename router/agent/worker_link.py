"""A connected worker as the dispatcher sees it: a `WorkerLink` over the worker's gRPC stream.

Why apart from the server: the dispatcher only speaks `WorkerLink` (send a chunk, drain, close); this
adapter is the one place that turns those calls into the `AgentMessage`s the `Work` stream yields.
"""

from __future__ import annotations

import queue
from collections.abc import Callable
from typing import Any

from router.dispatcher import ChunkTask, WorkerLink

CLOSE = object()
"""Put in a link's outbox to end the worker's response stream."""


class StreamLink(WorkerLink):
    """A worker's gRPC stream: chunks and drains go into the queue its response generator drains."""

    def __init__(self, worker_id: str, agent_pb2: Any, delay_for: Callable[[ChunkTask], float]) -> None:
        super().__init__(worker_id)
        self.outbox: queue.Queue[Any] = queue.Queue()
        self._pb = agent_pb2
        self._delay_for = delay_for

    def send_chunk(self, task: ChunkTask) -> None:
        chunk = self._pb.Chunk(
            chunk_id=task.chunk_id,
            epoch=task.epoch,
            program_id=task.program_id,
            payload=task.payload,
            program=task.program_json,
            delay_s=self._delay_for(task),
        )
        self.outbox.put(self._pb.AgentMessage(chunk=chunk))

    def send_drain(self, reason: str) -> None:
        self.outbox.put(self._pb.AgentMessage(drain=self._pb.Drain(reason=reason)))

    def close(self) -> None:
        self.outbox.put(CLOSE)

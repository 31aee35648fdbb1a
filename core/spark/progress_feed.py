"""Every micro-batch's progress of one named streaming query, each exactly once, and how it ended.

Spark posts a progress event per batch to the session's `StreamingQueryListener`s; polling
`lastProgress` instead sees only the newest, and `recentProgress` keeps the last hundred, so a
poller that falls behind loses batches and one that keeps up costs the driver a share of a core.
The listener runs on py4j's callback thread; it only queues, and the run's own thread takes the
progress from the queue, so callers' progress hooks run where they always did.

A progress event crosses py4j as its JSON alone (`_JsonProgressBridge`). PySpark's own bridge first
rebuilds the whole event field by field, one py4j round trip each, every call answered by the driver's
JVM: on one VM core a routed Q5 run (two sources, more operators) spent about 60 ms a second of its
driver's Python on it, a fixed cost per epoch that pacing turns into longer epochs (docs/adr/0055).
"""

from __future__ import annotations

import json
import threading
from typing import Any

from pyspark.sql.streaming import StreamingQueryListener
from pyspark.sql.streaming.listener import JStreamingQueryListener, StreamingQueryProgress


class ProgressFeed(StreamingQueryListener):
    """Progress and termination of every run of the query named `name` (restarts keep the name)."""

    def __init__(self, name: str) -> None:
        self._name = name
        self._ids: set[str] = set()
        self._ready: list[dict[str, Any]] = []
        self._failure: str | None = None
        self._stopped: set[str] = set()  # runs stopped on purpose: how they end is no failure
        self._changed = threading.Condition()
        self._bridge: Any = None  # the JVM's handle on `_JsonProgressBridge`, made when Spark first asks

    def onQueryStarted(self, event: Any) -> None:
        if event.name == self._name:
            with self._changed:
                self._ids.add(str(event.id))

    @property
    def _jlistener(self) -> Any:
        """What Spark's listener bus calls: PySpark's wrapper around our bridge, not around its own."""
        if self._bridge is None:
            from pyspark import SparkContext

            jvm = SparkContext._jvm
            assert jvm is not None, "a progress feed is added to a running session"
            self._bridge = jvm.PythonStreamingQueryListenerWrapper(_JsonProgressBridge(self))
        return self._bridge

    def onQueryProgress(self, event: Any) -> None:
        self.progressed(event.progress.json)

    def progressed(self, progress_json: str) -> None:
        """One batch's progress, as Spark's JSON: rebuilt from it exactly as `lastProgress` builds it
        (PySpark's field-by-field conversion writes a missing offset, the first batch's start, as the
        text "None", not as JSON)."""
        raw = json.loads(progress_json)
        if raw.get("name") != self._name:
            return
        progress = StreamingQueryProgress.fromJson(raw)
        with self._changed:
            self._ready.append(progress)
            self._changed.notify_all()

    def onQueryIdle(self, event: Any) -> None:
        pass

    def onQueryTerminated(self, event: Any) -> None:
        with self._changed:
            if str(event.id) in self._ids and event.exception and str(event.runId) not in self._stopped:
                self._failure = event.exception
                self._changed.notify_all()

    def stopping(self, run_id: str) -> None:
        """The run `run_id` is about to be stopped on purpose (to restart it). A stop interrupts the
        epoch in flight, and some of Spark's steps report the interrupt as their own error (a
        transformWithState's Python runner starting up); the epoch never committed, so the restarted
        run replays it from the checkpoint, and that error is not the query's."""
        with self._changed:
            self._stopped.add(run_id)

    def take(self, timeout_s: float) -> list[dict[str, Any]]:
        """The progress posted since the last call, waiting up to `timeout_s` for some."""
        with self._changed:
            if not self._ready and self._failure is None:
                self._changed.wait(max(timeout_s, 0.0))
            ready, self._ready = self._ready, []
            return ready

    @property
    def failure(self) -> str | None:
        """The error the query ended with, if it failed (a stop asked for is not a failure)."""
        with self._changed:
            return self._failure


class _JsonProgressBridge(JStreamingQueryListener):
    """PySpark's py4j bridge to a listener, but a progress event reaches it as its JSON: two py4j
    calls (the event's progress, its JSON) instead of one per field of the event."""

    def onQueryProgress(self, jevent: Any) -> None:
        self.pylistener.progressed(jevent.progress().json())

"""The VM agent's half of `--inject`: it makes worker kills, throttles and stalled workers happen.

Why in the agent: it owns the victims. It knows which worker holds which chunk (so a kill hits work
in flight), it is the only caller of the invoker (so a throttle looks to the fleet exactly like
Lambda's 429), and it writes every chunk a worker receives (so it can tell one worker to stall).
Each injection is counted (`injected_*` in router/stats.py) next to the counters that show the
recovery (`chunks_redispatched`, `throttles`, `chunk_timeouts`), so a drill can check both.

The share-based faults draw from a seeded generator: the same seed gives the same sequence of
decisions, so a drill or a test that sees a fault once sees it again. (Which invoke or chunk gets the
n-th draw still depends on timing; the sequence itself does not.)

| spec                           | made to happen by                                                 |
|--------------------------------|-------------------------------------------------------------------|
| kill-worker:every=T            | `WorkerKiller`: every T s from agent start, SIGKILL one worker     |
| kill-worker:after-chunks=N     | `WorkerKiller`: once N chunks were dispatched, SIGKILL one worker  |
| throttle:share=S               | `ThrottlingInvoker`: S of invokes raise Throttled before the fleet |
| slow-worker:share=S,delay=D    | `SlowChunks`: S of first dispatches carry Chunk.delay_s = D        |
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from core.errors import ConfigError
from core.fault_spec import AGENT_KINDS, KILL_WORKER, SLOW_WORKER, THROTTLE, FaultSpec, of_kind
from router import stats
from router.dispatcher import ChunkTask
from router.invokers.base import InvokeHandle, Invoker, Throttled


def check_agent_faults(specs: Iterable[FaultSpec]) -> tuple[FaultSpec, ...]:
    """The specs, if the agent can inject every one of them; else a ConfigError naming those it can."""
    out = tuple(specs)
    for spec in out:
        if not isinstance(spec, FaultSpec):
            raise ConfigError(f"agent faults must be FaultSpec values, got {spec!r}")
        if spec.kind not in AGENT_KINDS:
            raise ConfigError(
                f"the agent cannot inject {spec.kind}: it injects only {', '.join(AGENT_KINDS)}",
                hint="agent-restart, task-failure and query-restart are injected by the runner",
            )
    return out


def check_can_kill(specs: Iterable[FaultSpec], *, can_kill: bool) -> None:
    """A ConfigError if kill-worker is asked of a fleet whose processes the agent cannot reach."""
    if of_kind(specs, KILL_WORKER) and not can_kill:
        raise ConfigError(
            "kill-worker needs the embedded fleet",
            hint="run the agent with --invoker embedded, or drop --inject kill-worker",
        )


class ShareDraw:
    """Thread-safe draws that come out True for about `share` of the calls, from a fixed seed."""

    def __init__(self, share: float, seed: int) -> None:
        self.share = share
        self._rng = random.Random(seed)
        self._lock = threading.Lock()

    def __call__(self) -> bool:
        with self._lock:
            return self._rng.random() < self.share


class ThrottlingInvoker(Invoker):
    """An invoker that refuses a share of invokes with Throttled before they reach the backend.

    Why a decorator: the fleet must not be able to tell an injected throttle from Lambda's own, so it
    backs off and counts `throttles` the same way; only `injected_throttle` tells them apart.
    """

    def __init__(self, inner: Invoker, spec: FaultSpec, counters: stats.Counters, seed: int) -> None:
        self.inner = inner
        self.spec = spec
        self.counters = counters
        self._draw = ShareDraw(spec["share"], seed)

    @property
    def concurrency_limit(self) -> int:
        return self.inner.concurrency_limit

    def invoke_async(self, descriptor: Mapping[str, Any]) -> InvokeHandle:
        if self._draw():
            self.counters.add(stats.INJECTED_THROTTLE)
            raise Throttled(
                f"Rate Exceeded (injected by --inject {self.spec.text()})",
                hint="this throttle is a drill; drop --inject throttle to stop it",
            )
        return self.inner.invoke_async(descriptor)

    def close(self) -> None:
        self.inner.close()

    @property
    def can_kill(self) -> bool:
        return self.inner.can_kill

    def kill(self, worker_id: str) -> bool:
        return self.inner.kill(worker_id)


class SlowChunks:
    """Picks the chunks whose first dispatch stalls its worker for `delay` seconds.

    Only first dispatches: the chunk timeout takes a stalled chunk back and hands it to another worker,
    and that re-dispatch must run at full speed, or a share of 1 would stall every chunk forever.
    """

    def __init__(self, spec: FaultSpec, counters: stats.Counters, seed: int) -> None:
        self.delay_s = spec["delay"]
        self.counters = counters
        self._draw = ShareDraw(spec["share"], seed)

    def delay_for(self, task: ChunkTask) -> float:
        if task.dispatches != 1 or not self._draw():
            return 0.0
        self.counters.add(stats.INJECTED_SLOW_WORKER)
        return self.delay_s


WorkersView = Callable[[], list[tuple[str, int | None]]]
"""(worker id, chunk id it holds or None) of the connected workers: Dispatcher.workers."""


class WorkerKiller:
    """SIGKILLs one worker process, preferring one holding a chunk: every `every` seconds from `start`,
    or once, at the first tick after the `after-chunks`-th chunk was dispatched.

    A tick that finds no worker to kill is skipped and not counted (the next comes `every` later; an
    `after-chunks` kill tries again at the next tick).
    """

    def __init__(
        self,
        spec: FaultSpec,
        invoker: Invoker,
        workers: WorkersView,
        counters: stats.Counters,
        seed: int,
        start: float | None = None,
    ) -> None:
        self.every_s = spec.get("every")
        self.after_chunks = spec.get("after-chunks")
        self.invoker = invoker
        self.workers = workers
        self.counters = counters
        self._rng = random.Random(seed)
        self._next = (time.monotonic() if start is None else start) + (self.every_s or 0.0)
        self._done = False

    def tick(self, now: float | None = None) -> str | None:
        """Kill if the trigger fired since the last kill; returns the victim's worker id, if any."""
        if self.every_s is None:
            if self._done or self.counters.get(stats.CHUNKS_DISPATCHED) < (self.after_chunks or 0):
                return None
            victim = self.kill_one()
            self._done = victim is not None
            return victim
        now = time.monotonic() if now is None else now
        if now < self._next:
            return None
        missed = int((now - self._next) // self.every_s)  # periods a stalled tick loop slept through
        self._next += (missed + 1) * self.every_s
        return self.kill_one()

    def kill_one(self) -> str | None:
        connected = self.workers()
        busy = [wid for wid, chunk in connected if chunk is not None]
        candidates = busy or [wid for wid, _ in connected]
        self._rng.shuffle(candidates)
        for wid in candidates:
            if self.invoker.kill(wid):
                self.counters.add(stats.INJECTED_KILL_WORKER)
                return wid
        return None


class AgentFaults:
    """All faults one agent injects, built from its `--inject` specs.

    `invoker(inner)` decorates the fleet's invoker, `chunk_delay(task)` is asked for every chunk sent
    to a worker, and `tick()` runs on the agent's tick loop. With no specs each is a no-op.
    """

    def __init__(self, specs: Iterable[FaultSpec], counters: stats.Counters, seed: int = 1) -> None:
        self.specs = check_agent_faults(specs)
        self.counters = counters
        self.seed = seed
        self._slow = [
            SlowChunks(s, counters, seed + i) for i, s in enumerate(of_kind(self.specs, SLOW_WORKER))
        ]
        self._killers: list[WorkerKiller] = []

    def invoker(self, inner: Invoker | None) -> Invoker | None:
        """`inner` with the throttle specs applied; a ConfigError if kill-worker cannot reach its workers."""
        check_can_kill(self.specs, can_kill=inner is not None and inner.can_kill)
        if inner is None:
            return None
        for i, spec in enumerate(of_kind(self.specs, THROTTLE)):
            inner = ThrottlingInvoker(inner, spec, self.counters, self.seed + i)
        return inner

    def start(self, invoker: Invoker | None, workers: WorkersView) -> None:
        """Start the kill schedules (their periods count from here: the agent's start)."""
        if invoker is None:
            return
        now = time.monotonic()
        self._killers = [
            WorkerKiller(s, invoker, workers, self.counters, self.seed + i, start=now)
            for i, s in enumerate(of_kind(self.specs, KILL_WORKER))
        ]

    def chunk_delay(self, task: ChunkTask) -> float:
        for slow in self._slow:
            delay = slow.delay_for(task)
            if delay:
                return delay
        return 0.0

    def tick(self) -> None:
        now = time.monotonic()
        for killer in self._killers:
            killer.tick(now)

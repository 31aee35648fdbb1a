"""The warm pool of paper section 4.4: workers' environments started before a burst needs them, and kept
warm while the agent is idle, on every backend (the embedded fleet, LocalStack, AWS).

Why keep-warm at all: a platform reclaims an execution environment that stays idle for a while (the
embedded fleet after `idle_lifetime_s`, LocalStack after LAMBDA_KEEPALIVE_MS, AWS after a time it does
not publish: ADR 0039), and the next burst then pays a cold start per worker. A warm-up invocation
every `keep_warm_s` seconds of idleness resets that clock for `pool` environments at the price of
`pool` short invocations.

Why warm-ups carry programs: an environment that has compiled a keyed operator's program and run it
once over made-up rows answers its first real seal as fast as its later ones; one that has not pays
polars' first runs of every operation on the first batches after a switch, where a burst's latency
peaks (ADR 0045). The VM names its keyed programs once its query starts (`learn`); every later round
warms with them.

Why only while idle: while workers are connected or starting, their sessions hold the warm environments,
so a warm-up would start new ones (cold, and billed) instead of keeping the pool; the sessions
themselves keep their environments warm. The idle clock restarts whenever the fleet is busy, so the
first ping comes `keep_warm_s` after the last session ended, which is when the platform's clock starts
too.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from core.errors import ConfigError
from router import stats

logger = logging.getLogger(__name__)

DEFAULT_KEEP_WARM_S = 240.0
"""Under the shortest idle lifetime we know of: LocalStack keeps an idle environment 600 s (measured,
bench.cold_start), the embedded fleet as long; AWS publishes no figure, and 5 minutes is the ping
interval usual there (ADR 0039). A ping costs one short invocation per pooled environment."""
MAX_POLL_S = 1.0  # how often the loop looks whether the fleet is idle (finer for short intervals)


@dataclass(frozen=True)
class Round:
    """What one round of warm-ups found: how many answered and how many of those started cold."""

    answered: int
    cold: int


@dataclass(frozen=True)
class WarmPoolConfig:
    """`prewarm`: environments warmed once at start-up; `pool`: environments each keep-warm round warms
    (the fleet's max workers); `keep_warm_s`: seconds of idleness between rounds, None or 0 for none."""

    prewarm: int = 0
    pool: int = 0
    keep_warm_s: float | None = None

    def __post_init__(self) -> None:
        for name in ("prewarm", "pool"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise ConfigError(f"{name} must be a non-negative integer, got {value!r}")
        if self.keep_warm_s is not None and not self.keep_warm_s >= 0:
            raise ConfigError(
                f"--keep-warm must be 0 (off) or a positive number of seconds, got {self.keep_warm_s!r}",
                hint=f"e.g. --keep-warm {DEFAULT_KEEP_WARM_S:g}, below how long the platform keeps an idle "
                "environment",
            )

    @property
    def keeps_warm(self) -> bool:
        return bool(self.keep_warm_s) and self.pool > 0

    @property
    def poll_s(self) -> float:
        return min(MAX_POLL_S, (self.keep_warm_s or MAX_POLL_S) / 4)


Programs = Sequence[Mapping[str, Any]]  # program specs as JSON objects (lambda_worker/program.py)


class WarmPool:
    """Warms `config.prewarm` environments at start, then keeps `config.pool` warm while `idle()` says the
    fleet has nothing to do. `warm(n, programs)` runs one round of n concurrent warm-ups on the backend,
    each compiling and warming `programs`."""

    def __init__(
        self,
        config: WarmPoolConfig,
        warm: Callable[[int, Programs], Round],
        idle: Callable[[], bool],
        counters: stats.Counters,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self._warm = warm
        self._idle = idle
        self._counters = counters
        self._clock = clock
        self._since = clock()  # the fleet's last busy moment, or the last round
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._programs: dict[str, Mapping[str, Any]] = {}
        self._programs_lock = threading.Lock()

    def start(self) -> None:
        if self.config.prewarm or self.config.keeps_warm:
            self._thread = threading.Thread(target=self._run, name="warm-pool", daemon=True)
            self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def learn(self, program: Mapping[str, Any]) -> Round:
        """Warm every later round with `program` too, and warm the environments this pool keeps (`pool`
        with keep-warm, else the `prewarm` ones) with it now if the fleet is idle: a busy fleet's sessions
        hold the environments, and a warm-up would start new ones."""
        with self._programs_lock:
            self._programs[json.dumps(program, sort_keys=True)] = program
        n = self.config.pool if self.config.keeps_warm else self.config.prewarm
        if not n or not self._idle():
            return Round(0, 0)
        done = self._round(n)
        self._counters.add(stats.PROGRAM_WARM_UPS, done.answered)
        return done

    def prewarm(self) -> Round:
        """The start-up round: counted as workers_prewarmed."""
        done = self._round(self.config.prewarm)
        self._counters.add(stats.WORKERS_PREWARMED, done.answered)
        self._since = self._clock()
        return done

    def tick(self) -> Round | None:
        """One look at the fleet: a keep-warm round if it has been idle `keep_warm_s` since it was last
        busy or warmed, else None."""
        now = self._clock()
        if not self._idle():
            self._since = now
            return None
        assert self.config.keep_warm_s
        if now - self._since < self.config.keep_warm_s:
            return None
        done = self._round(self.config.pool)
        self._counters.add(stats.KEEP_WARM_PINGS, done.answered)
        self._counters.add(stats.KEEP_WARM_COLD, done.cold)
        self._since = self._clock()
        return done

    def _round(self, n: int) -> Round:
        with self._programs_lock:
            programs = list(self._programs.values())
        try:
            return self._warm(n, programs)
        except Exception as e:  # a round that failed only costs a later cold start; the loop goes on
            logger.warning("a warm-up round of %d failed: %s", n, e)
            return Round(0, 0)

    def _run(self) -> None:
        if self.config.prewarm:
            done = self.prewarm()
            logger.info("warm pool: %d of %d warmed (%d cold)", done.answered, self.config.prewarm, done.cold)
        if not self.config.keeps_warm:
            return
        while not self._stop.wait(self.config.poll_s):
            done = self.tick()
            if done is not None:
                logger.info(
                    "keep-warm: %d of %d answered (%d cold)", done.answered, self.config.pool, done.cold
                )

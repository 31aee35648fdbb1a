"""The monitoring-scaling loop: observe once a second, decide, apply, log.

Why a thread on the driver: the driver already knows the source offsets and the epochs, and the
offload plan it publishes is read by the source readers at their next planning (the routing log
makes that safe mid-stream). Applying only publishes a plan; the agent grows its fleet from the
chunks it is sent, up to the plan's workers.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from policy.decision_log import DecisionLog
from policy.monitor import Monitor, Observation
from policy.offload_policy import Decision, SpongePolicy


class PolicyLoop:
    def __init__(
        self,
        *,
        monitor: Monitor,
        policy: SpongePolicy | None,
        apply: Callable[[Decision], None],
        log: DecisionLog | None,
        interval_s: float = 1.0,
        gauges: Callable[[], dict[str, float]] = dict,
    ) -> None:
        self.monitor = monitor
        self.policy = policy
        self.apply = apply
        self.log = log
        self.interval_s = interval_s
        self.gauges = gauges  # recorded with each sample (e.g. the agent's connected workers)
        self.samples: list[tuple[Observation, Decision | None, dict[str, float]]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.log is not None:
            self.log.close()

    def _run(self) -> None:
        next_t = time.time()
        last: tuple[float, int] | None = None
        while not self._stop.is_set():
            obs = self.monitor.observe()
            decision = self.policy.decide(obs) if self.policy is not None else None
            if decision is not None:
                if self.log is not None:
                    self.log.record(obs, decision)
                if (decision.share, decision.workers) != last:
                    self.apply(decision)
                    last = (decision.share, decision.workers)
            self.samples.append((obs, decision, self.gauges()))
            next_t += self.interval_s
            self._stop.wait(max(0.0, next_t - time.time()))

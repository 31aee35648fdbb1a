"""The monitoring-scaling loop: observe once a period, decide, apply, log.

The period is the policy's (`PolicyConfig.period_s`, 0.5 s) unless the caller fixes another: the
policy counts periods to confirm a burst and to release it, so a loop slower than the policy's period
reacts later by as many periods as it confirms on.

Why a thread on the driver: the driver already knows the source offsets and the epochs, and the
offload plan it publishes is read by the source readers at their next planning (the routing log
makes that safe mid-stream). Applying only publishes a plan; the agent grows its fleet from the
chunks it is sent, up to the plan's workers.

VMs are a separate action (`vm_action`), called with every observation and decision: adding a VM is
slow, counted in VMs rather than in shares, and decided by other rules (VMBase's "overloaded: buy a
VM", the persistent-burst rule's cost comparison), which read the same decision the plan comes from.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from typing import Any

from policy.decision_log import DecisionLog
from policy.monitor import Monitor, Observation
from policy.offload_policy import Decision, SpongePolicy

# Called with each period's observation and decision; returns what the decision log records with that
# decision (DecisionLog.record's VM keywords: vms_usable, vms_pending, vm_request) or None.
VmAction = Callable[[Observation, Decision | None], Mapping[str, Any] | None]
# Called with each period's sample (observation, decision or None, gauges) once it is taken.
OnSample = Callable[[Observation, Decision | None, dict[str, float]], None]


class PolicyLoop:
    def __init__(
        self,
        *,
        monitor: Monitor,
        policy: SpongePolicy | None,
        apply: Callable[[Decision], None],
        log: DecisionLog | None,
        interval_s: float | None = None,
        recent_s: float = 0.25,
        gauges: Callable[[], dict[str, float]] = dict,
        vm_action: VmAction | None = None,
        keep_samples: int | None = None,
        on_sample: OnSample | None = None,
    ) -> None:
        self.monitor = monitor
        self.policy = policy
        self.apply = apply
        self.log = log
        # The policy's own period by default; without a policy (a noscaling run) once a second.
        self.interval_s = (
            interval_s if interval_s is not None else (policy.config.period_s if policy is not None else 1.0)
        )
        self.recent_s = min(recent_s, self.interval_s)  # the window of the observation's recent input rate
        self.gauges = gauges  # recorded with each sample (e.g. the agent's connected workers)
        self.vm_action = vm_action  # asks for or gives back VMs (None: the VMs are fixed)
        # Every sample for a drill (its report reads them all); a live run that may last for days keeps
        # the last `keep_samples` only and reads each one as it is taken (`on_sample`).
        self.samples: list[tuple[Observation, Decision | None, dict[str, float]]] | deque = (
            [] if keep_samples is None else deque(maxlen=keep_samples)
        )
        self.on_sample = on_sample
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="policy-loop", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        if self.log is not None:
            self.log.close()

    def _vm_step(self, obs: Observation, decision: Decision | None) -> Mapping[str, Any] | None:
        """Run the VM action; a failure is kept in `errors` and must not stop the monitoring."""
        if self.vm_action is None:
            return None
        try:
            return self.vm_action(obs, decision)
        except Exception as e:
            self.errors.append(f"t={obs.t:.1f}s vm_action: {type(e).__name__}: {e}")
            return None

    def _run(self) -> None:
        next_t = time.time()
        last: tuple[float, int] | None = None
        while not self._stop.is_set():
            obs = self.monitor.observe()
            decision = self.policy.decide(obs) if self.policy is not None else None
            vm_log = self._vm_step(obs, decision)
            if decision is not None:
                if self.log is not None:
                    self.log.record(obs, decision, **(vm_log or {}))
                if (decision.share, decision.workers) != last:
                    self.apply(decision)
                    last = (decision.share, decision.workers)
            gauges = self.gauges()
            self.samples.append((obs, decision, gauges))
            if self.on_sample is not None:
                try:
                    self.on_sample(obs, decision, gauges)
                except Exception as e:  # a reader's failure must not stop the policy
                    self.errors.append(f"t={obs.t:.1f}s on_sample: {type(e).__name__}: {e}")
            next_t += self.interval_s
            if self._stop.wait(max(0.0, next_t - self.recent_s - time.time())):
                break
            self.monitor.mark()
            self._stop.wait(max(0.0, next_t - time.time()))

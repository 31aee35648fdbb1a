"""The VM side of a drill's policy loop: when to ask the VM pool for VMs, and when to give them back.

Why separate from the offloading policy: the SpongePolicy turns each observation into an offloaded
share within a second; VMs take tens of seconds and are bought by other rules that read the same
decision. Both rules here are `PolicyLoop.vm_action`s and talk to the pool through four calls only
(`request`, `release`, `usable`, `pending`), so any pool with those calls (core/spark/vm_pool.VmPool)
fits.

* `ScaleOnBurst` is VMBase and VMInit: the burst is detected exactly as Sponge detects it (a decision
  whose trigger is not "hold" and whose share is > 0, or whose trigger is "no-gain", means "the VMs
  are overloaded"), but instead of offloading, the pool is asked for VMs, once. VMBase's VMs boot for
  the launch delay; VMInit's were initialised in advance, so only the executor start and the
  migration of tasks and state are paid.
  No scale-in within a drill: the paper's VMBase and VMInit keep the VMs they bought for the rest of
  the run, and a drill ends a few tens of seconds after its burst.
* `PersistentVms` is Sponge's own persistent-burst rule (policy/persistent_burst.py, ADR 0007): it
  buys VMs when renting the Lambdas for the rest of a long burst would cost more, and releases them
  after the burst. The pool's executor count feeds the monitor's vm_cores, so the policy lowers the
  offloaded share by itself once the VMs are usable; once it offloads nothing while they are, the idle
  workers are released (their sessions would bill on for nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from policy.monitor import Observation
from policy.offload_policy import HOLD, NO_GAIN, Decision


class Pool(Protocol):
    """What the VM rules need from a VM pool (core/spark/vm_pool.VmPool)."""

    def request(self, n: int, delay_s: float) -> Any: ...
    def release(self, n: int) -> int: ...
    def usable(self) -> int: ...
    def pending(self) -> int: ...


def overloaded(decision: Decision | None) -> bool:
    """Sponge's burst trigger: a signal fired and the policy wants part of the load off the VMs, or
    would want it if offloading paid for this query (NO_GAIN)."""
    if decision is None:
        return False
    return decision.trigger == NO_GAIN or (decision.trigger != HOLD and decision.share > 0)


@dataclass
class ScaleOnBurst:
    """VMBase/VMInit: ask the pool for `vms` VMs at the first burst the policy detects, then never again."""

    pool: Pool
    vms: int
    launch_delay_s: float
    events: list[dict[str, Any]] = field(default_factory=list)  # what it did, for the run's result

    def __call__(self, obs: Observation, decision: Decision | None) -> None:
        if self.events or not overloaded(decision):
            return
        assert decision is not None
        started = time.perf_counter()
        self.pool.request(self.vms, self.launch_delay_s)
        self.events.append(
            {
                "t": round(obs.t, 3),
                "add": self.vms,
                "release": 0,
                "reason": f"overloaded ({decision.trigger}, the policy would offload {decision.share:.0%})"
                if decision.trigger != NO_GAIN
                else "overloaded (no-gain: offloading would not relieve the VMs)",
                "call_ms": round((time.perf_counter() - started) * 1000.0, 1),
            }
        )


@dataclass
class PersistentVms:
    """Sponge's persistent bursts: the rule says when to buy or release VMs, the pool does it.

    `base_vms` are the pool's VMs that are always there; the rule counts added VMs only.
    """

    rule: Any  # policy.persistent_burst.PersistentBurstRule
    pool: Pool
    base_vms: int
    launch_delay_s: float
    # Drains the idle workers beyond a count (core/spark/offload_session.py `release_workers`).
    release_workers: Callable[[int, str], int] | None = None
    events: list[dict[str, Any]] = field(default_factory=list)
    _workers_released: bool = False  # since the bought VMs took the load over

    def __call__(self, obs: Observation, decision: Decision | None) -> dict[str, Any] | None:
        if decision is None:
            return None
        usable, pending = max(self.pool.usable() - self.base_vms, 0), self.pool.pending()
        if not usable or decision.share > 0:
            self._workers_released = False
        elif self.release_workers is not None and not self._workers_released:
            self._workers_released = True
            reason = "the burst is on the bought VMs"
            self.events.append({"t": round(obs.t, 3), "workers_released": self.release_workers(0, reason)})
        request = self.rule.step(obs, decision, usable, pending)
        if request is not None:
            released = 0
            if request.add:
                self.pool.request(request.add, self.launch_delay_s)
            if request.release:
                released = self.pool.release(request.release)
            self.events.append(
                {
                    "t": round(obs.t, 3),
                    "add": request.add,
                    "release": request.release,
                    "released": released,
                    "reason": request.reason,
                }
            )
        return {"vms_usable": usable, "vms_pending": pending, "vm_request": request}

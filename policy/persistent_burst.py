"""A burst that persists is handed to new VMs: ski rental says when, M/M/k how many (ADR 0007).

Why a rule of its own, next to the SpongePolicy and not inside it: the policy reacts within a second
with Lambdas and must stay a pure function of the observations; buying VMs is a slower, money-driven
decision taken on top of the policy's decisions (Sponge 6.5: "later expands the cluster to additional
slow-starting VMs if the peaks persist"). The rule sees exactly what the live loop sees each second
(the Observation, the policy's Decision, the VM pool's usable and pending counts) and nothing else: no
clock, no randomness, no I/O. So a decision log that holds those inputs replays every request exactly
(policy/decision_log.py), and the simulator (policy/sim) runs the same code at paper scale.

Per step:

* **Burst age.** A burst starts at the first observation whose decision offloads (share > 0) after a
  calm one (share 0: the policy only returns to 0 through its own scale-down hold, so one zero share
  already is a calm period) and ends at the next zero share. With no forecast, a burst that has lasted
  T is expected to last T more (ski rental, `PersistentBurstConfig.remaining_factor`).
* **How many** (Es-Stream V-B, `policy/queueing.py`): the VMs form an M/M/k system fed by the input
  rate lambda, each VM serving mu = cores_per_vm x per-core rate x 0.7 (the CPU target). k is
  `min_servers(lambda, mu, max_wait_s=wait_target_s)`: the fewest VMs with k mu > lambda whose mean
  queueing wait meets the target. Chosen over `es_stream_servers` because its target is a latency in
  seconds an operator can state, while Algorithm 1's beta is a unitless resource share: here the price
  of a VM is already weighed in dollars by the cost rule, so a second, unitless price would count the
  VMs' cost twice. (Per record, service takes microseconds, so either rule gives the stability bound
  plus a margin only near saturation.) The backlog is not in lambda: it stays on the Lambdas until it
  is drained (Eq. 1). New VMs = k - base - held, where held is what the pool has usable or pending (or
  what this rule requested and has not released, if more: the pool may not show a request yet). None
  while the input fits the base and held VMs inside the policy's 60-80 % band (at most 80 % of their
  cores): k counts VMs at exactly the 70 % target, so a stable load sized at 70 % (as the paper's are)
  would otherwise ask for one more VM than the policy itself thinks it needs, e.g. while the policy
  drains the backlog after a burst.
* **When** (`cheaper_to_buy_vms`): those new VMs against the Lambda cores in use (the decision's
  workers; the offloaded rate through Eq. 3 if it has none), with `buying` the previous outcome for the
  hysteresis. No request at all while one is pending: the M/M/k count is re-evaluated once the pending
  VMs are usable, and only a need beyond them is bought (a burst that keeps growing).
* **Release**: the VMs this rule added go once the burst has passed, i.e. the policy has released its
  share and the input fits the base VMs (inside the policy's CPU band, at most 80 % of their cores),
  for `release_hold_s` in a row, and each request only after the VMs' billing minimum (60 s in
  `Prices`) since it was made: releasing sooner saves nothing.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from core.errors import ConfigError
from policy.cost_model import PersistentBurstConfig, Prices, VmDecision, cheaper_to_buy_vms
from policy.equations import CPU_HIGH, CPU_TARGET, lambda_cores
from policy.monitor import Observation
from policy.offload_policy import Decision
from policy.queueing import min_servers

DEFAULT_WAIT_TARGET_S = 0.1
DEFAULT_MAX_NEW_VMS = 50  # the paper's VMBase may add up to 10x its 5 VMs (6.1)


@dataclass(frozen=True)
class VmRequest:
    """What the VM pool should do now, and why; `decision` holds the cost rule's inputs and outputs."""

    t: float
    add: int  # VMs to request now (0 if none)
    release: int  # VMs to release now (0 if none)
    reason: str
    decision: VmDecision | None
    servers: int  # the M/M/k count k it sized with

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> VmRequest:
        d = data.get("decision")
        return cls(**{**data, "decision": VmDecision(**d) if d is not None else None})


@dataclass(frozen=True)
class _Group:
    """VMs requested together: released together, after the billing minimum from `t`."""

    t: float
    vms: int


def _finite_positive(name: str, value: float) -> None:
    if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
        raise ConfigError(
            f"{name} must be a finite number > 0, got {value!r}",
            hint="profile the per-core rate and rho first (sponge drill does so at start-up)",
        )


def _count(name: str, value: int, least: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < least:
        raise ConfigError(f"{name} must be an integer >= {least}, got {value!r}")


class PersistentBurstRule:
    """Decides, once per observation, whether to request or release VMs for a persistent burst.

    per_core_rate: events/s a VM core carries at 100 % CPU, used until a decision brings the policy's
    learnt one. rho: a Lambda core's capacity in VM cores. cores_per_vm: cores of one added VM.
    base_vms: the VMs that are always there (never released). wait_target_s: the M/M/k mean-wait target.
    release_hold_s: how long the burst must have passed before added VMs go; by default the launch delay
    plus the handover, so a dip shorter than it takes to get VMs back does not give them away.
    max_new_vms: at most this many added VMs at a time (the Lambdas carry the rest).
    """

    def __init__(
        self,
        config: PersistentBurstConfig,
        prices: Prices,
        *,
        per_core_rate: float,
        rho: float,
        cores_per_vm: int,
        base_vms: int,
        wait_target_s: float = DEFAULT_WAIT_TARGET_S,
        release_hold_s: float | None = None,
        max_new_vms: int = DEFAULT_MAX_NEW_VMS,
    ) -> None:
        _finite_positive("per_core_rate", per_core_rate)
        _finite_positive("rho", rho)
        _count("cores_per_vm", cores_per_vm, 1)
        _count("base_vms", base_vms, 0)
        _count("max_new_vms", max_new_vms, 1)
        if not (math.isfinite(wait_target_s) and wait_target_s > 0):
            raise ConfigError(
                f"the M/M/k waiting-time target must be > 0 s, got {wait_target_s!r}",
                hint="0.1 s: no finite VM count makes the mean wait exactly 0",
            )
        hold = config.launch_delay_s + config.handover_s if release_hold_s is None else release_hold_s
        if not (math.isfinite(hold) and hold >= 0):
            raise ConfigError(
                f"release_hold_s must be a finite number >= 0, got {release_hold_s!r}",
                hint="e.g. the VM launch delay plus the handover (the default)",
            )
        self.config = config
        self.prices = prices
        self.per_core_rate = float(per_core_rate)
        self.rho = float(rho)
        self.cores_per_vm = cores_per_vm
        self.base_vms = base_vms
        self.wait_target_s = float(wait_target_s)
        self.release_hold_s = float(hold)
        self.max_new_vms = max_new_vms
        self._burst_start: float | None = None
        self._buying = False
        self._groups: list[_Group] = []
        self._passed_since: float | None = None

    # --- the log's view ------------------------------------------------------------------------------
    def settings(self) -> dict[str, Any]:
        """Everything the rule was built from, as JSON, so a log can rebuild it (`from_settings`)."""
        return {
            "config": asdict(self.config),
            "prices": asdict(self.prices),
            "per_core_rate": self.per_core_rate,
            "rho": self.rho,
            "cores_per_vm": self.cores_per_vm,
            "base_vms": self.base_vms,
            "wait_target_s": self.wait_target_s,
            "release_hold_s": self.release_hold_s,
            "max_new_vms": self.max_new_vms,
        }

    @classmethod
    def from_settings(cls, settings: dict[str, Any]) -> PersistentBurstRule:
        s = dict(settings)
        config = PersistentBurstConfig(**s.pop("config"))
        prices = Prices(**s.pop("prices"))
        return cls(config, prices, **s)

    @property
    def held(self) -> int:
        """VMs this rule requested and has not released."""
        return sum(g.vms for g in self._groups)

    # --- the rule ------------------------------------------------------------------------------------
    def step(
        self, obs: Observation, decision: Decision, vms_usable: int, vms_pending: int
    ) -> VmRequest | None:
        """One observation's VM action: a request, a release, or None (nothing to do).

        `vms_usable` and `vms_pending` count the *added* VMs only (the base VMs excluded): a pool whose
        usable count includes the base VMs must pass `usable - base_vms`. Apply the request before the
        next step; the rule also remembers what it requested, so a pool that shows a request a step
        late does not cause a second one.
        """
        _count("vms_usable", vms_usable, 0)
        _count("vms_pending", vms_pending, 0)
        per_core = decision.per_core_rate if decision.per_core_rate > 0 else self.per_core_rate
        mu = self.cores_per_vm * per_core * CPU_TARGET / 100.0
        k = self._servers(obs.input_rate, mu)
        if decision.share > 0:
            if self._burst_start is None:
                self._burst_start = obs.t
        else:
            self._burst_start = None
            self._buying = False
        released = self._release(obs, decision, per_core, k)
        if released is not None or self._burst_start is None:
            return released
        held = max(vms_usable + vms_pending, self.held)
        band_top = (self.base_vms + held) * self.cores_per_vm * per_core * CPU_HIGH / 100.0
        if obs.input_rate <= band_top:
            return None  # the VMs there carry the input inside the policy's band: not a VM's worth
        need = max(0, min(k - self.base_vms - held, self.max_new_vms - held))
        if need == 0 or vms_pending > 0:
            return None  # enough VMs usable or on their way; a pending request is never repeated
        cores = self._lambda_cores(decision, per_core)
        d = cheaper_to_buy_vms(
            obs.t - self._burst_start,
            cores,
            rho=self.rho,
            prices=self.prices,
            config=self.config,
            buying=self._buying,
            vms=need,
        )
        self._buying = d.buy
        if not d.buy:
            return None
        self._groups.append(_Group(obs.t, need))
        reason = (
            f"{d.reason}; M/M/k: {k} VMs of mu {mu:,.0f}/s for {obs.input_rate:,.0f}/s "
            f"(wait <= {self.wait_target_s:g} s), {self.base_vms} base + {held} held"
        )
        return VmRequest(obs.t, need, 0, reason, d, k)

    def _servers(self, arrival_rate: float, mu: float) -> int:
        """The M/M/k count, capped at the base plus `max_new_vms` (beyond it the Lambdas carry the rest)."""
        cap = self.base_vms + self.max_new_vms
        if arrival_rate / mu >= cap:
            return cap
        try:
            return min_servers(max(arrival_rate, 0.0), mu, max_wait_s=self.wait_target_s, max_servers=cap)
        except ConfigError:  # the wait target needs more than the cap
            return cap

    def _lambda_cores(self, decision: Decision, per_core: float) -> int:
        """Lambda cores in use: the decision's workers, or Eq. 3 on the offloaded rate if it has none."""
        if decision.workers > 0:
            return decision.workers * self.config.cores_per_lambda
        return lambda_cores(decision.required_rate * decision.share, per_core, self.rho)

    def _release(self, obs: Observation, decision: Decision, per_core: float, k: int) -> VmRequest | None:
        """Release the added VMs once the burst has passed for the hold and they had their minimum."""
        fits = self.base_vms * self.cores_per_vm * per_core * CPU_HIGH / 100.0
        if decision.share > 0 or obs.input_rate > fits:
            self._passed_since = None
            return None
        if self._passed_since is None:
            self._passed_since = obs.t
        if not self._groups or obs.t - self._passed_since < self.release_hold_s:
            return None
        minimum = self.prices.vm_minimum_billed_s - 1e-9
        due = [g for g in self._groups if obs.t - g.t >= minimum]
        if not due:
            return None
        self._groups = [g for g in self._groups if obs.t - g.t < minimum]
        n = sum(g.vms for g in due)
        since = ", ".join(f"{g.t:g}" for g in due)
        reason = (
            f"burst over: no offloaded share and the input {obs.input_rate:,.0f}/s fits the "
            f"{self.base_vms} base VMs (<= {fits:,.0f}/s at {CPU_HIGH:g} % CPU) for "
            f"{obs.t - self._passed_since:g} s; releasing {n} VMs requested at t = {since} s"
        )
        return VmRequest(obs.t, 0, n, reason, None, k)

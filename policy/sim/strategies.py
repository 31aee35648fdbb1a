"""The six policies under simulation (paper 6.1-6.2): sponge, noscaling, vmbase, sfbase, vminit, over.

Why each looks as it does:
* sponge calls the real `policy.offload_policy.SpongePolicy` on every simulated second's Observation
  and applies its Decision unchanged: the share is routed from the next micro-batch on, the workers
  are started (warm within the warm pool, cold beyond it). Offloaded records cost the VMs only the
  router and the merge (`QueryProfile.sponge_vm_cost`). With a `PersistentBurstRule` it also hands a
  persistent burst to new VMs (ADR 0007): the rule sees the same Observation and Decision and the
  added VMs' usable and pending counts; requested VMs are billed from the request and usable after
  the launch and JVM start, cold (JIT ramp) but with no migration pause, because a new executor joins
  the running application and the policy hands load back by lowering its share (it sees the new
  cores in the next Observation); released VMs stop being billed at once.
* sfbase replays Sponge's decisions (the paper configured SF baselines "to make the best scaling
  decisions", 6.2) but without operator insertion: each change of the share migrates whole tasks and
  their state, a stop-the-world pause of the task reconfiguration time plus the moved state's
  (de)serialization, and the work it cannot move stays on the VMs (`QueryProfile.sf_residual`).
* vmbase reacts on the same signals as the policy (CPU above the band, queue delay above its limit),
  asks for the VMs that carry the observed input at the 70 % target, and gets them after the launch
  delay and the JVM start; then tasks and state migrate (a pause) and the new JVMs start cold (6.2).
* vminit has those VMs running from the start and pays only the migration when it reacts.
* over has enough VMs for the burst's peak at the 70 % target from the start; noscaling never scales.
"""

from __future__ import annotations

import math

from policy.monitor import Observation
from policy.offload_policy import Decision, PolicyConfig, SpongePolicy
from policy.persistent_burst import PersistentBurstRule, VmRequest
from policy.sim.costs import BaselineCosts
from policy.sim.engine import Cluster, VmGroup


def vms_for(rate: float, per_core_rate: float, cores_per_vm: int, target: float = 0.7) -> int:
    """VMs whose cores carry `rate` events/s at the CPU target."""
    return math.ceil(rate / (target * per_core_rate * cores_per_vm) - 1e-9)


class SpongeStrategy:
    """The real policy, decision for decision."""

    name = "sponge"

    def __init__(
        self, config: PolicyConfig, vm_rule: PersistentBurstRule | None = None, vm_ready_s: float = 0.0
    ) -> None:
        self.policy = SpongePolicy(config)
        self.vm_rule = vm_rule
        self.vm_ready_s = vm_ready_s  # from a VM request to its executor taking tasks
        self.decisions: list[Decision] = []
        self.observations: list[Observation] = []
        self.vm_requests: list[VmRequest] = []
        self._planned = 0.0

    def start(self, cluster: Cluster) -> None:
        cluster.offload_cost = cluster.profile.sponge_vm_cost

    def on_second(self, cluster: Cluster, obs: Observation) -> None:
        decision = self.policy.decide(obs)
        self.observations.append(obs)
        self.decisions.append(decision)
        cluster.set_workers(decision.workers)
        if decision.share != self._planned:
            self._planned = decision.share
            cluster.plan(decision.share)
        if self.vm_rule is not None:
            self._vms(self.vm_rule, cluster, obs, decision)

    def _vms(self, rule: PersistentBurstRule, cluster: Cluster, obs: Observation, decision: Decision) -> None:
        req = rule.step(obs, decision, *cluster.added_vms())
        if req is None:
            return
        self.vm_requests.append(req)
        if req.add:
            group = cluster.add_vms(req.add, cluster.t + self.vm_ready_s, cluster.t, cold_jit=True)
            cluster.at(cluster.t, "vm-request", f"{req.add} VMs ({req.reason})")
            cluster.at(group.usable_from, "vm-ready", f"{req.add} VMs usable (cold JIT), no migration pause")
        if req.release:
            released = cluster.release_vms(req.release)
            cluster.at(cluster.t, "vm-release", f"{released} VMs ({req.reason})")


class SfBaseStrategy:
    """Sponge's decisions, paid for with task and state migration (no router, transient or merge ops)."""

    name = "sfbase"

    def __init__(self, decisions: list[Decision], baseline: BaselineCosts) -> None:
        self.decisions = decisions
        self.baseline = baseline
        self._target = 0.0
        self._current = 0.0
        self._migrating = False
        self._seen = 0

    def start(self, cluster: Cluster) -> None:
        cluster.offload_cost = cluster.profile.sf_residual

    def on_second(self, cluster: Cluster, obs: Observation) -> None:
        del obs  # open loop: the decisions are Sponge's, second for second
        if not self.decisions:
            return
        d = self.decisions[min(self._seen, len(self.decisions) - 1)]
        self._seen += 1
        cluster.set_workers(d.workers)
        self._target = d.share
        self._migrate(cluster)

    def _migrate(self, cluster: Cluster) -> None:
        if self._migrating or abs(self._target - self._current) < 1e-9:
            return
        target, moved = self._target, abs(self._target - self._current)
        state = cluster.profile.state_gb * moved
        pause = self.baseline.task_migration_s + state * self.baseline.state_s_per_gb
        end = cluster.pause(pause)
        self._migrating = True
        cluster.at(
            cluster.t,
            "migration",
            f"{moved:.0%} of the tasks and {state:.2f} GB of state, {pause:.1f} s pause",
        )

        def done() -> None:
            self._current = target
            cluster.share = target
            self._migrating = False
            self._migrate(cluster)

        cluster.at(end, "migrated", f"share {target:.3f}", done)


class VmScalingStrategy:
    """vmbase (launch VMs when overloaded) and vminit (VMs pre-started, migrate when overloaded)."""

    def __init__(
        self,
        name: str,
        config: PolicyConfig,
        baseline: BaselineCosts,
        *,
        prestarted_vms: int = 0,
        max_new_vms: int = 50,
    ) -> None:
        self.name = name
        self.config = config
        self.baseline = baseline
        self.prestarted_vms = prestarted_vms
        self.max_new_vms = max_new_vms
        self.triggered_at: float | None = None
        self._group: VmGroup | None = None

    def start(self, cluster: Cluster) -> None:
        if self.prestarted_vms:
            self._group = cluster.add_vms(self.prestarted_vms, math.inf, 0.0, cold_jit=False)
            cluster.at(0.0, "vm-ready", f"{self.prestarted_vms} VMs pre-started, holding no tasks")

    def on_second(self, cluster: Cluster, obs: Observation) -> None:
        cfg = self.config
        overloaded = (obs.cpu or 0.0) > cfg.cpu_high or obs.queue_delay_s > cfg.queue_delay_limit_s
        if self.triggered_at is not None or not overloaded:
            return
        self.triggered_at = cluster.t
        base = cluster.config
        if self._group is None:
            wanted = vms_for(obs.input_rate, cluster.profile.per_core_rate, base.cores_per_vm, cfg.cpu_target)
            n = max(0, min(self.max_new_vms, wanted - base.vms))
            if n == 0:
                return
            self._group = cluster.add_vms(n, math.inf, cluster.t, cold_jit=True)
            ready = cluster.t + self.baseline.vm_launch_s + self.baseline.jvm_start_s
            cluster.at(cluster.t, "scale", f"request {n} VMs (usable after launch + JVM start)")
        else:
            ready = cluster.t
            cluster.at(cluster.t, "scale", f"migrate tasks to the {self._group.vms} pre-started VMs")
        group = self._group

        def boot() -> None:
            total = cluster.usable_cores() + group.cores
            moved = group.cores / total
            state = cluster.profile.state_gb * moved
            pause = self.baseline.task_migration_s + state * self.baseline.state_s_per_gb
            end = cluster.pause(pause)
            group.usable_from = end
            if group.jit_from is not None:
                group.jit_from = end
            cluster.at(
                end,
                "migrated",
                f"{moved:.0%} of the tasks and {state:.2f} GB of state after a "
                f"{pause:.1f} s pause; {group.vms} VMs usable"
                + (" (cold JIT)" if group.jit_from is not None else ""),
            )

        cluster.at(ready, "vm-ready", f"{group.vms} VMs up, migrating tasks", boot)


class StaticStrategy:
    """noscaling (the base VMs only) and over (enough VMs for the peak from the start)."""

    def __init__(self, name: str, extra_vms: int = 0) -> None:
        self.name = name
        self.extra_vms = extra_vms

    def start(self, cluster: Cluster) -> None:
        if self.extra_vms:
            cluster.add_vms(self.extra_vms, 0.0, 0.0, cold_jit=False)

    def on_second(self, cluster: Cluster, obs: Observation) -> None:
        del cluster, obs

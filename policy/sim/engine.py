"""The simulated cluster: a fluid FIFO queue stepped every `dt`, with discrete events on a timeline.

Why this model: at paper scale an event-by-event simulation would push ~10^8 events per run through
Python. Within a step the input, the VMs and the workers move at constant rates, so the queues are
fluid; what changes the rates happens at exact times and is a discrete event on a heap (a VM becomes
usable, a migration pause ends, a worker finishes starting, a new routing plan takes effect). The step
(0.1 s) only bounds when such an event is seen: it is a fifth of the policy's 0.5 s monitoring period.

The path of a record (FIFO everywhere):
  source queue --VM pulls at capacity / cost--> committed on the VM (share 1 - f)
                                            \\-> Lambda queue --workers--> committed (share f)
A record the router sends away still costs the VM `offload_cost` VM records (the router, the merge; for
SFBase the work it cannot move). The share f and the worker count come from a `Strategy`, which sees
one `Observation` per monitoring period (`EngineConfig.period_s`), exactly as the live policy loop does.

Cumulative counts per step are kept so that metrics.py can invert them (FIFO: the record that arrived
when N records had arrived leaves when N records have left).
"""

from __future__ import annotations

import heapq
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from core.errors import ConfigError
from policy.monitor import Observation
from policy.sim.costs import QueryProfile

EPS = 1e-6


@dataclass(frozen=True)
class EngineConfig:
    """Time step, cluster and the latencies every record pays on top of queueing."""

    dt: float = 0.1
    vms: int = 5
    cores_per_vm: int = 4
    max_workers: int = 200
    warm_workers: int = 0  # workers kept warm (4.4); further ones start cold
    cold_start_s: float = 0.315
    warm_start_s: float = 0.003
    plan_delay_s: float = 0.1  # a new routing plan applies from the next micro-batch (one step)
    epoch_s: float = 0.5  # a micro-batch's duration, reported as the Observation's last epoch
    max_drain_s: float = 3600.0  # give up draining after this long past the trace
    period_s: float = 1.0  # the monitoring period: one Observation, one strategy step (the policy's)

    def __post_init__(self) -> None:
        if not 0 < self.dt <= 1 or abs(round(1 / self.dt) * self.dt - 1) > 1e-9:
            raise ConfigError(f"dt must divide one second, got {self.dt}", hint="0.1 or 0.05")
        steps = round(self.period_s / self.dt)
        if steps < 1 or abs(steps * self.dt - self.period_s) > 1e-9:
            raise ConfigError(
                f"the monitoring period must be a multiple of dt = {self.dt} s, got {self.period_s}",
                hint="e.g. 0.5 or 1.0",
            )
        if self.vms < 1 or self.cores_per_vm < 1 or self.max_workers < 0 or self.warm_workers < 0:
            raise ConfigError("the cluster needs at least one VM core and non-negative worker counts")

    @property
    def steps_per_s(self) -> int:
        return round(1 / self.dt)

    @property
    def steps_per_period(self) -> int:
        return round(self.period_s / self.dt)


@dataclass
class VmGroup:
    """VMs that joined together: usable from `usable_from`, cold-JIT ramp from `jit_from` (None: warm),
    billed from `billed_from` until `released_at` (inf: kept to the end)."""

    vms: int
    cores: int
    usable_from: float
    billed_from: float
    jit_from: float | None = None
    released_at: float = math.inf

    def up(self, t: float) -> bool:
        """Usable at `t`: launched and not yet released."""
        return self.usable_from <= t + 1e-9 < self.released_at


class Strategy(Protocol):
    """A scaling policy under simulation: set up the cluster, then react once per monitoring period
    (`on_second` keeps its name from when the period was always a second)."""

    name: str

    def start(self, cluster: Cluster) -> None: ...

    def on_second(self, cluster: Cluster, obs: Observation) -> None: ...


@dataclass
class Series:
    """Per-step records (index i covers [i dt, (i + 1) dt)); cumulative counts are at the step's end."""

    arrived: list[float] = field(default_factory=list)
    pulled: list[float] = field(default_factory=list)
    to_lambda: list[float] = field(default_factory=list)
    lambda_done: list[float] = field(default_factory=list)
    share: list[float] = field(default_factory=list)
    busy: list[float] = field(default_factory=list)
    vm_cores: list[int] = field(default_factory=list)
    workers: list[int] = field(default_factory=list)


class Cluster:
    """The simulated VMs, workers and queues; strategies act on it through its methods."""

    def __init__(self, profile: QueryProfile, config: EngineConfig, jit_floor: float, jit_warmup_s: float):
        self.profile = profile
        self.config = config
        self.t = 0.0
        self.source = 0.0  # released, not yet pulled by the VMs
        self.lambda_queue = 0.0  # routed to workers, not yet processed
        self.share = 0.0
        self.offload_cost = profile.sponge_vm_cost
        self.groups: list[VmGroup] = [VmGroup(config.vms, config.vms * config.cores_per_vm, 0.0, 0.0)]
        self.pause_until = 0.0
        self.workers: list[float] = []  # ready time of each held worker
        self.worker_starts = 0
        self.worker_seconds = 0.0
        self._trim_to, self._trim_after = 0, 0.0
        self.log: list[tuple[float, str, str]] = []
        self._jit = (jit_floor, jit_warmup_s)
        self._timeline: list[tuple[float, int, str, Callable[[], None]]] = []
        self._seq = itertools.count()

    # --- the timeline -------------------------------------------------------------------------------
    def at(self, when: float, kind: str, detail: str, action: Callable[[], None] | None = None) -> None:
        """Schedule a discrete event; it is logged when it happens."""

        def run() -> None:
            self.log.append((round(self.t, 3), kind, detail))
            if action is not None:
                action()

        heapq.heappush(self._timeline, (when, next(self._seq), kind, run))

    def _fire_due(self) -> None:
        while self._timeline and self._timeline[0][0] <= self.t + 1e-9:
            _, _, _, run = heapq.heappop(self._timeline)
            run()

    # --- what strategies change ----------------------------------------------------------------------
    def add_vms(self, vms: int, usable_from: float, billed_from: float, cold_jit: bool) -> VmGroup:
        group = VmGroup(
            vms, vms * self.config.cores_per_vm, usable_from, billed_from, usable_from if cold_jit else None
        )
        self.groups.append(group)
        return group

    def added_vms(self) -> tuple[int, int]:
        """VMs added to the base ones and not released: (usable now, still launching)."""
        live = [g for g in self.groups[1:] if g.released_at > self.t + 1e-9]
        usable = sum(g.vms for g in live if g.up(self.t))
        return usable, sum(g.vms for g in live) - usable

    def release_vms(self, n: int) -> int:
        """Release `n` added VMs now, the oldest first (a group is split if only part of it goes);
        their billing stops now. Returns how many were released."""
        left = n
        for g in list(self.groups[1:]):
            if left <= 0:
                break
            if g.released_at <= self.t + 1e-9:
                continue
            if g.vms <= left:
                g.released_at = self.t
                left -= g.vms
            else:
                per_vm = g.cores // g.vms
                g.vms, g.cores = g.vms - left, g.cores - left * per_vm
                self.groups.append(
                    VmGroup(left, left * per_vm, g.usable_from, g.billed_from, g.jit_from, released_at=self.t)
                )
                left = 0
        return n - left

    def pause(self, seconds: float) -> float:
        """Stop the VMs' processing (a migration: Spark stops, moves tasks and state, resumes)."""
        self.pause_until = max(self.pause_until, self.t) + seconds
        return self.pause_until

    def plan(self, share: float, delay: float | None = None) -> None:
        """Route `share` of the records to workers from the next micro-batch on."""
        when = self.t + (self.config.plan_delay_s if delay is None else delay)

        def apply() -> None:
            self.share = share

        self.at(when, "plan", f"share {share:.3f}", apply)

    def set_workers(self, n: int) -> None:
        """Hold `n` workers: new ones are ready after a warm or cold start, extra ones are released."""
        n = max(0, min(n, self.config.max_workers))
        self._trim_to, self._trim_after = n, self.t + self.config.plan_delay_s
        for _ in range(n - len(self.workers)):
            warm = len(self.workers) < self.config.warm_workers
            ready = self.t + (self.config.warm_start_s if warm else self.config.cold_start_s)
            self.workers.append(ready)
            self.worker_starts += 1

    # --- capacity ------------------------------------------------------------------------------------
    def usable_cores(self) -> int:
        return sum(g.cores for g in self.groups if g.up(self.t))

    def vm_capacity(self) -> float:
        """Events/s the usable VM cores carry at 100 % CPU (0 during a migration pause)."""
        if self.t < self.pause_until - 1e-9:
            return 0.0
        floor, warmup = self._jit
        total = 0.0
        for g in self.groups:
            if not g.up(self.t):
                continue
            eff = 1.0
            if g.jit_from is not None and warmup > 0:
                eff = min(1.0, floor + (1 - floor) * (self.t - g.jit_from) / warmup)
            total += g.cores * eff
        return total * self.profile.per_core_rate

    def _trim(self) -> None:
        """Release workers the strategy no longer holds, once the plan that stops feeding them applies;
        the last one goes only when the Lambda queue is empty (a worker finishes its chunks first)."""
        if len(self.workers) <= self._trim_to or self.t < self._trim_after - 1e-9:
            return
        if self._trim_to == 0 and self.lambda_queue > EPS:
            return
        while len(self.workers) > self._trim_to:
            self.workers.remove(max(self.workers))  # the latest-ready first

    def ready_workers(self) -> int:
        return sum(1 for r in self.workers if r <= self.t + 1e-9)


@dataclass
class RunResult:
    """One simulated run: the per-step series, the cluster at the end and what happened when."""

    policy: str
    dt: float
    trace_steps: int
    series: Series
    cluster: Cluster
    observations: list[Observation]


def run(
    strategy: Strategy,
    profile: QueryProfile,
    arrivals: Sequence[float],
    config: EngineConfig,
    *,
    jit_floor: float,
    jit_warmup_s: float,
) -> RunResult:
    """Step the cluster through `arrivals` (events per step), then drain every queue with no input.

    Draining with no input leaves the latency of every traced record exact (FIFO: later records never
    delay earlier ones) and makes conservation checkable: every record of the trace is processed.
    """
    cl = Cluster(profile, config, jit_floor, jit_warmup_s)
    strategy.start(cl)
    s = Series()
    dt, per_period = config.dt, config.steps_per_period
    max_steps = len(arrivals) + math.ceil(config.max_drain_s / dt)
    arrived = pulled = to_l = done_l = 0.0
    second_in = second_done = second_busy = 0.0
    observations: list[Observation] = []
    i = 0
    while True:
        cl.t = i * dt
        cl._fire_due()
        a = arrivals[i] if i < len(arrivals) else 0.0
        cl.source += a
        cap = cl.vm_capacity() * dt
        f = cl.share
        cost = (1 - f) + f * cl.offload_cost
        take = min(cl.source, cap / cost) if cap > 0 else 0.0
        cl.source -= take
        busy = 1.0 if cap <= 0 else take * cost / cap
        cl.lambda_queue += take * f
        ready = cl.ready_workers()
        done = min(cl.lambda_queue, ready * profile.lambda_rate * dt)
        cl.lambda_queue -= done
        cl._trim()
        cl.worker_seconds += len(cl.workers) * dt if i < len(arrivals) else 0.0
        arrived += a
        pulled += take
        to_l += take * f
        done_l += done
        s.arrived.append(arrived)
        s.pulled.append(pulled)
        s.to_lambda.append(to_l)
        s.lambda_done.append(done_l)
        s.share.append(f)
        s.busy.append(busy)
        s.vm_cores.append(cl.usable_cores())
        s.workers.append(len(cl.workers))
        second_in += a
        second_done += take * (1 - f) + done
        second_busy += busy
        i += 1
        if i % per_period == 0:
            cl.t = i * dt
            obs = Observation(
                t=cl.t,
                cpu=min(second_busy / per_period, 1.0),
                input_rate=second_in / config.period_s,
                processed_rate=second_done / config.period_s,
                backlog=int(cl.source + cl.lambda_queue),
                epoch_s=config.epoch_s,
                vm_cores=cl.usable_cores(),
                cost_ms=0.0,
            )
            observations.append(obs)
            strategy.on_second(cl, obs)
            second_in = second_done = second_busy = 0.0
            drained = cl.source + cl.lambda_queue < EPS * max(arrived, 1.0)
            if (i >= len(arrivals) and drained) or i >= max_steps:
                break
    return RunResult(strategy.name, dt, len(arrivals), s, cl, observations)

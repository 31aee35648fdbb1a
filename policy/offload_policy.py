"""The offloading policy of Sponge section 4.3: from one Observation per second to an offload plan.

Why this shape: `decide` is a pure function of the observations it has seen, so the live loop, the
offline replay of a decision log and the paper-scale simulator all run this same code.

The rule, per observation ("CPU" below is the observation's `load`: the CPU, or on a micro-batch
engine the share of each epoch spent on records, which is what its CPU fails to say):
* learn the VMs' stable per-core rate (Eq. 2) while nothing is offloaded and the CPU sits in the
  60-80 % band, starting from the rate profiled at start-up;
* trigger when the CPU leaves the band upwards, the input outruns what the VMs carry at the 70 %
  target, or the queue delay (backlog / rate, the Sponge code's signal) passes its limit, for
  `trigger_periods` consecutive monitoring periods (section 4.3: "outside a stable range for
  consecutive periods"), so one period's blip is not a burst; the decision says which fired and
  for how many periods a signal has been out (`periods_out`);
* estimate the events the VMs cannot absorb: the larger of the backlog seen and the Simpson integral
  (Eq. 1) of the input the VMs kept above their target capacity since the burst began, to be drained
  within the query's window slide (the recovery deadline);
* the VMs keep the target rate; the rest is the offloaded share, carried by ceil(Eq. 3) Lambda
  workers (rho = a Lambda core's capacity in VM cores, profiled at start-up), checked against an
  M/M/k model of the chunks waiting for them (`worker_sizing`, policy/worker_sizing.py);
* never offload when an offloaded record costs the VMs as much as a kept one (`offload_cost` >= 1,
  measured by the drill's probes): the trigger is then NO_GAIN, and only more VMs can help;
* scale down with hysteresis: only after the input has fitted the VMs and the backlog has drained for
  `release_periods` consecutive periods (and at least `scale_down_hold_s`), and never while catching
  up; then release everything once the VMs carry what is required inside their CPU band, else lower
  the share over several rounds;
* size a burst on the observation's `arrival_rate`, which sees a burst that began inside the period;
* when the monitor reports a load per operator, order the operators whose work should move first by
  Es-Stream's skewness rule (policy/skew.py) and log the order with the decision.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from core.errors import ConfigError
from policy.equations import CPU_HIGH, CPU_LOW, CPU_TARGET, per_core_rate, simpson
from policy.monitor import Observation
from policy.skew import offload_order
from policy.worker_sizing import EQ3_MMK, check_sizing, workers_for

HOLD = "hold"
CPU = "cpu"
INPUT_RATE = "input-rate"
QUEUE_DELAY = "queue-delay"
SCALE_DOWN = "scale-down"
RELEASE = "release"
NO_GAIN = "no-gain"  # a burst, but an offloaded record would cost the VMs as much as a kept one


def offload_pays(offload_cost: float) -> bool:
    """An offloaded record costs the VMs less than a kept one, so offloading adds VM capacity."""
    return offload_cost < 1


@dataclass(frozen=True)
class PolicyConfig:
    """The policy's knobs; `per_core_rate` and `rho` come from the start-up profile."""

    per_core_rate: float  # events/s one VM core carries at 100 % CPU
    rho: float  # a Lambda core's capacity in VM cores
    deadline_s: float = 2.0  # recovery deadline: the query's window slide
    max_workers: int = 8
    max_share: float = 0.95
    cpu_low: float = CPU_LOW / 100
    cpu_target: float = CPU_TARGET / 100
    cpu_high: float = CPU_HIGH / 100
    queue_delay_limit_s: float = 2.0
    # The monitoring period the loop observes at. Half a second: two periods confirm a burst within the
    # 2 s reaction bar wherever in a period it begins (ADR 0040).
    period_s: float = 0.5
    trigger_periods: int = 2  # consecutive periods out of the band before a trigger fires (1: at once)
    release_periods: int = 10  # consecutive calm periods before each scale-down round (5 s at 0.5 s)
    scale_down_hold_s: float = 0.0  # calm seconds each round also needs (logs from before: 5 s)
    learn_rate: float = 0.2  # weight of a new stable sample in the per-core rate
    headroom: float = 1.1  # offload this much more than the arithmetic says (rates are noisy)
    # VM work an offloaded record still costs (routing, merging), in kept records; at 1 or more
    # offloading relieves nothing, and the policy keeps everything on the VMs (trigger NO_GAIN).
    offload_cost: float = 0.0
    # Workers for the offloaded rate (policy/worker_sizing.py): Eq. 3 raised until a chunk of
    # `chunk_events` records waits `chunk_wait_s` at most on average for a worker (M/M/k).
    worker_sizing: str = EQ3_MMK
    chunk_events: int = 16_384  # the router's chunk (router/source_router.py RouteOptions.chunk_rows)
    chunk_wait_s: float = 0.1
    es_stream_beta: float = 0.5  # a worker's resource share, for worker_sizing "es-stream"
    skew_eta: float = 0.0  # Es-Stream's skewness threshold: above it, the hottest operator moves first

    def __post_init__(self) -> None:
        if self.per_core_rate <= 0 or self.rho <= 0:
            raise ConfigError(
                "the policy needs a positive per-core rate and rho",
                hint="profile them first (sponge drill does so at start-up)",
            )
        if not 0 < self.cpu_low < self.cpu_target < self.cpu_high <= 1:
            raise ConfigError("the CPU band must satisfy 0 < low < target < high <= 1")
        if not 0 <= self.offload_cost < float("inf"):
            raise ConfigError(
                f"offload_cost must be a finite number >= 0, got {self.offload_cost}",
                hint="it is the VM cost of an offloaded record relative to one kept on the VMs",
            )
        if not 0 < self.max_share <= 1 or self.max_workers < 1 or self.deadline_s <= 0:
            raise ConfigError("max_share must be in (0, 1], max_workers >= 1 and deadline_s > 0")
        if not (math.isfinite(self.period_s) and 0 < self.period_s <= 60):
            raise ConfigError(
                f"period_s must be in (0, 60] s, got {self.period_s!r}",
                hint="the monitoring period: 0.5 s by default, 1 s in logs from before",
            )
        for name in ("trigger_periods", "release_periods"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigError(
                    f"{name} must be an integer >= 1, got {value!r}",
                    hint="1 acts on the first period; 2 or more ignores shorter blips",
                )
        if not (math.isfinite(self.scale_down_hold_s) and self.scale_down_hold_s >= 0):
            raise ConfigError(f"scale_down_hold_s must be >= 0 s, got {self.scale_down_hold_s!r}")
        if not math.isfinite(self.skew_eta):
            raise ConfigError(f"skew_eta must be a finite number, got {self.skew_eta!r}")
        check_sizing(self.worker_sizing, self.chunk_events, self.chunk_wait_s, self.es_stream_beta)

    @property
    def burst_memory(self) -> int:
        """Observations Eq. 1's integral keeps: two minutes of them at any period."""
        return max(2, math.ceil(120.0 / self.period_s - 1e-9))


@dataclass(frozen=True)
class Decision:
    """What the loop applies: the share of records to offload and the workers to keep for them."""

    t: float
    share: float
    workers: int
    trigger: str  # which signal fired (HOLD when none did)
    vm_capacity: float  # events/s the VMs carry at the CPU target
    required_rate: float  # input rate plus the backlog drained by the deadline
    excess_events: float
    per_core_rate: float
    periods_out: int = 0  # consecutive periods a trigger signal has been out, this one included
    priority: tuple[str, ...] = ()  # operators whose work should move first (the skewness rule)
    skew: float | None = None  # Es-Stream's skewness of the operators' loads (None: undefined or unknown)

    def __post_init__(self) -> None:
        object.__setattr__(self, "priority", tuple(self.priority))  # a log holds it as a JSON list

    def to_json(self) -> dict[str, Any]:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class SpongePolicy:
    config: PolicyConfig
    share: float = 0.0
    workers: int = 0
    _per_core: float = field(init=False)
    _burst: deque[tuple[Observation, float]] = field(init=False)
    _calm_since: float | None = field(init=False, default=None)
    _calm: int = field(init=False, default=0)  # consecutive calm periods
    _out: int = field(init=False, default=0)  # consecutive periods with a trigger signal out

    def __post_init__(self) -> None:
        self._per_core = self.config.per_core_rate
        self._burst = deque(maxlen=self.config.burst_memory)

    def decide(self, obs: Observation) -> Decision:
        cfg = self.config
        self._learn(obs)
        capacity = cfg.cpu_target * self._per_core * obs.vm_cores
        in_flight = obs.epoch_s or 0.0  # a micro-batch's own records always wait about one epoch
        band_top = capacity * cfg.cpu_high / cfg.cpu_target  # a load inside the band is not a burst
        load = obs.load
        cpu_high = load is not None and load > cfg.cpu_high
        rate = obs.arrival_rate
        signal = (
            HOLD  # no epoch has finished yet: rates and backlog say nothing about capacity
            if obs.epoch_s is None
            else QUEUE_DELAY
            if obs.queue_delay_s > cfg.queue_delay_limit_s + in_flight
            else INPUT_RATE
            if rate > band_top
            else CPU
            if cpu_high and rate > capacity
            else HOLD
        )
        self._out = self._out + 1 if signal != HOLD else 0
        fired = signal if self._out >= cfg.trigger_periods else HOLD  # confirmed over consecutive periods
        overloaded = signal != HOLD or (obs.epoch_s is not None and rate > band_top)
        if overloaded:
            self._burst.append((obs, self.share))  # the share in force while this second's input arrived
        excess = self._excess(capacity)
        queued = max(obs.backlog - rate * in_flight, 0.0)  # beyond the epoch in flight
        required = rate + max(queued, excess) / cfg.deadline_s
        wanted = self._share_for(required, capacity)
        if fired != HOLD and not offload_pays(cfg.offload_cost) and required * cfg.headroom > capacity:
            fired = NO_GAIN  # the VMs need relief that offloading cannot give
        elif fired != HOLD and wanted > self.share:
            self._calm_since, self._calm = None, 0
            self._set(wanted, capacity, required)
        elif self.share > 0 and not overloaded and obs.queue_delay_s <= in_flight + cfg.deadline_s / 2:
            self._calm_since = obs.t if self._calm_since is None else self._calm_since
            self._calm += 1
            if self._calm >= cfg.release_periods and obs.t - self._calm_since >= cfg.scale_down_hold_s:
                if required <= band_top:  # the VMs carry it inside their band: release everything,
                    wanted = 0.0  # since a routed epoch's own fixed cost makes a sliver slower than none
                fired = SCALE_DOWN if wanted > 0 else RELEASE
                self._set(wanted if wanted < self.share * 0.9 else self.share, capacity, required)
                self._calm_since, self._calm = obs.t, 0  # another round only after another calm hold
                self._burst.clear()
        else:
            self._calm_since, self._calm = None, 0
        order = offload_order(obs.operator_loads, cfg.skew_eta) if obs.operator_loads else None
        return Decision(
            t=obs.t,
            share=self.share,
            workers=self.workers,
            trigger=fired,
            vm_capacity=capacity,
            required_rate=required,
            excess_events=excess,
            per_core_rate=self._per_core,
            periods_out=self._out,
            priority=order.operators if order is not None else (),
            skew=order.skew if order is not None else None,
        )

    def _share_for(self, required: float, capacity: float) -> float:
        """The least share s with the VMs' load at the target: required x ((1 - s) + s x offload_cost)
        <= capacity, since an offloaded record still costs the VMs its routing and merging."""
        cfg = self.config
        if required <= 0 or not offload_pays(cfg.offload_cost):
            return 0.0
        share = (1.0 - capacity / (required * cfg.headroom)) / (1.0 - cfg.offload_cost)
        return min(cfg.max_share, max(0.0, share))

    def _set(self, share: float, capacity: float, required: float) -> None:
        self.share = round(share, 4)
        cfg = self.config
        offloaded = required * self.share
        workers = workers_for(
            offloaded,
            self._per_core,
            cfg.rho,
            cfg.cpu_target,
            sizing=cfg.worker_sizing,
            chunk_events=cfg.chunk_events,
            chunk_wait_s=cfg.chunk_wait_s,
            beta=cfg.es_stream_beta,
            max_workers=cfg.max_workers,
        )
        self.workers = min(cfg.max_workers, max(workers, 1)) if self.share > 0 else 0

    def _learn(self, obs: Observation) -> None:
        """Eq. 2 from stable periods: nothing offloaded, CPU in band, input served without a queue."""
        cfg = self.config
        load = obs.load
        if self.share > 0 or load is None or not cfg.cpu_low <= load <= cfg.cpu_high:
            return
        if obs.input_rate <= 0 or obs.queue_delay_s > 1.0 or obs.arrival_rate > obs.input_rate * 1.1:
            return  # idle, queued, or the rate changed within the second: not a stable period
        sample = per_core_rate(obs.input_rate / max(obs.vm_cores, 1), load * 100)
        self._per_core += cfg.learn_rate * (sample - self._per_core)

    def _excess(self, capacity: float) -> float:
        """Eq. 1's left side over this burst: the events the VMs could not absorb and must still drain.

        The integrand is the input the VMs kept (the offloaded share went to the workers) minus their
        target capacity, signed, so seconds in which the VMs ran below capacity drain what earlier
        seconds queued: the estimate falls back to zero once the offloaded share has caught up,
        instead of growing for as long as the burst lasts.
        """
        if len(self._burst) < 2:
            return 0.0
        samples = [o.input_rate * (1.0 - share) - capacity for o, share in self._burst]
        first, last = self._burst[0][0].t, self._burst[-1][0].t
        dt = (last - first) / (len(self._burst) - 1)
        return max(simpson(samples, dt), 0.0) if dt > 0 else 0.0

"""What a burst costs on Lambda and on VMs, and when buying VMs beats renting Lambdas (Sponge 6.5).

Why a model at all: Lambda cores cost more per core-second than VM cores (a 1769 MB x86 function, one
vCPU, is about 1.6x an r5.xlarge core at 2023 list prices), but they start in well under a second
while a VM takes tens of seconds. Short bursts are cheapest on Lambda; a burst that persists should be
handed to new VMs (paper 6.5, Fig. 15(b)). Everything here is a pure function of its inputs and of a
`Prices` object, so a logged decision replays offline and the simulator prices runs the same way.

Defaults are 2023-era AWS list prices, us-east-1, on-demand (the paper's time), not today's:

* Lambda: USD 0.0000166667 per GB-second on x86_64, USD 0.0000133334 on arm64 (first pricing tier),
  USD 0.20 per million requests, duration billed per 1 ms; GB = MB / 1024.
* Lambda provisioned concurrency: USD 0.0000041667 per GB-second for each environment kept warm
  (x86_64; 0.0000033334 on arm64), used or not, and invocations on those environments at USD
  0.0000097222 per GB-second (0.0000077778) instead of the on-demand duration price.
* EC2 r5.xlarge (4 vCPU, 32 GiB), Linux on-demand: USD 0.252 per hour, billed per second with a
  60-second minimum per instance start.
* Kinesis Data Streams, provisioned mode: USD 0.015 per shard-hour and USD 0.014 per million PUT
  payload units (a record of up to 25 KB is one unit). A drill prorates the shard-hours over its run,
  as it does a VM's hour: the stream serves the job all day, and the drill bills its share of it.

The VM-or-Lambda rule is the ski-rental rule: with no forecast of how long a burst will last, assume
it lasts as long again as it has lasted so far (`remaining_factor` = 1), and buy VMs once renting
Lambdas for that long would cost more than launching VMs (which must still be bridged by Lambdas for
the launch delay and the handover). Deterministically that pays at most about twice the cost of the
best choice in hindsight, whatever the burst's length. A hysteresis margin keeps the decision from
flipping when the forecast load hovers near the break-even point.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from core.errors import ConfigError

SECONDS_PER_DAY = 86_400.0
MB_PER_GB = 1024.0
LAMBDA_MIN_MB = 128
LAMBDA_MAX_MB = 10_240
ARCHITECTURES = ("x86_64", "arm64")


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        bound = ">= 0" if allow_zero else "> 0"
        raise ConfigError(
            f"{name} must be a finite number {bound}, got {value!r}",
            hint="fix the price table or the configuration",
        )


@dataclass(frozen=True)
class Prices:
    """Unit prices, in USD; defaults are 2023 us-east-1 list prices (see the module docstring).

    Why typed and validated: a price typo (per hour vs per second, MB vs GB) silently flips every
    decision, so a negative, zero or non-finite price is refused where the table is built.
    """

    lambda_usd_per_gb_s_x86_64: float = 0.0000166667
    lambda_usd_per_gb_s_arm64: float = 0.0000133334
    lambda_usd_per_million_requests: float = 0.20
    lambda_provisioned_usd_per_gb_s_x86_64: float = 0.0000041667
    lambda_provisioned_usd_per_gb_s_arm64: float = 0.0000033334
    lambda_provisioned_duration_usd_per_gb_s_x86_64: float = 0.0000097222
    lambda_provisioned_duration_usd_per_gb_s_arm64: float = 0.0000077778
    lambda_billing_increment_s: float = 0.001
    vm_type: str = "r5.xlarge"
    vm_usd_per_hour: float = 0.252
    vm_cores: int = 4
    vm_billing_increment_s: float = 1.0
    vm_minimum_billed_s: float = 60.0
    kinesis_usd_per_shard_hour: float = 0.015
    kinesis_usd_per_million_put_units: float = 0.014

    def __post_init__(self) -> None:
        _positive("lambda_usd_per_gb_s_x86_64", self.lambda_usd_per_gb_s_x86_64)
        _positive("lambda_usd_per_gb_s_arm64", self.lambda_usd_per_gb_s_arm64)
        _positive("lambda_usd_per_million_requests", self.lambda_usd_per_million_requests, allow_zero=True)
        for name in (
            "lambda_provisioned_usd_per_gb_s_x86_64",
            "lambda_provisioned_usd_per_gb_s_arm64",
            "lambda_provisioned_duration_usd_per_gb_s_x86_64",
            "lambda_provisioned_duration_usd_per_gb_s_arm64",
        ):
            _positive(name, getattr(self, name))
        _positive("lambda_billing_increment_s", self.lambda_billing_increment_s)
        _positive("vm_usd_per_hour", self.vm_usd_per_hour)
        _positive("vm_billing_increment_s", self.vm_billing_increment_s)
        _positive("vm_minimum_billed_s", self.vm_minimum_billed_s, allow_zero=True)
        _positive("kinesis_usd_per_shard_hour", self.kinesis_usd_per_shard_hour)
        _positive(
            "kinesis_usd_per_million_put_units",
            self.kinesis_usd_per_million_put_units,
            allow_zero=True,
        )
        if not isinstance(self.vm_cores, int) or self.vm_cores < 1:
            raise ConfigError(
                f"vm_cores must be an integer >= 1, got {self.vm_cores!r}", hint=f"{self.vm_type} has 4 vCPUs"
            )
        if not self.vm_type:
            raise ConfigError("vm_type must be named", hint="for example r5.xlarge")

    def lambda_usd_per_gb_s(self, arch: str) -> float:
        return self._by_arch("lambda_usd_per_gb_s", arch)

    def provisioned_usd_per_gb_s(self, arch: str) -> float:
        """An environment kept warm by provisioned concurrency, per GB-second, used or not."""
        return self._by_arch("lambda_provisioned_usd_per_gb_s", arch)

    def provisioned_duration_usd_per_gb_s(self, arch: str) -> float:
        """An invocation's duration on a provisioned environment, per GB-second."""
        return self._by_arch("lambda_provisioned_duration_usd_per_gb_s", arch)

    def _by_arch(self, price: str, arch: str) -> float:
        if arch not in ARCHITECTURES:
            raise ConfigError(
                f"unknown Lambda architecture {arch!r}", hint=f"one of {', '.join(ARCHITECTURES)}"
            )
        return float(getattr(self, f"{price}_{arch}"))

    @property
    def vm_usd_per_s(self) -> float:
        return self.vm_usd_per_hour / 3600.0


def _billed(seconds: float, increment: float, minimum: float = 0.0) -> float:
    """Seconds billed for one instance running `seconds`: rounded up to the increment, at least `minimum`."""
    if seconds <= 0:
        return 0.0
    # The epsilon keeps 60.0 s from being billed as 60.001 s after float rounding.
    return max(minimum, math.ceil(seconds / increment - 1e-9) * increment)


def lambda_cost_usd(
    workers: int,
    memory_mb: int,
    seconds: float,
    requests: int | None = None,
    *,
    prices: Prices,
    arch: str = "x86_64",
) -> float:
    """What `workers` Lambda instances of `memory_mb` cost running `seconds` each, plus `requests`.

    `requests` defaults to one invocation per worker (a worker that dials out to the agent and serves
    chunks until its deadline is one request however many chunks it takes).
    """
    if workers < 0:
        raise ConfigError(f"the worker count must be >= 0, got {workers}")
    if not LAMBDA_MIN_MB <= memory_mb <= LAMBDA_MAX_MB:
        raise ConfigError(
            f"Lambda memory must be {LAMBDA_MIN_MB}-{LAMBDA_MAX_MB} MB, got {memory_mb}",
            hint="1769 MB gives one full vCPU",
        )
    _positive("seconds", seconds, allow_zero=True)
    n_requests = workers if requests is None else requests
    if n_requests < 0:
        raise ConfigError(f"the request count must be >= 0, got {n_requests}")
    gb_s = workers * _billed(seconds, prices.lambda_billing_increment_s) * memory_mb / MB_PER_GB
    return gb_s * prices.lambda_usd_per_gb_s(arch) + n_requests * prices.lambda_usd_per_million_requests / 1e6


def fleet_cost_usd(
    workers_by_second: Sequence[float],
    memory_mb: int,
    provisioned: int = 0,
    *,
    prices: Prices,
    arch: str = "x86_64",
) -> float:
    """What a fleet of workers cost, given how many ran in each second of a run.

    Up to `provisioned` of them each second ran on environments kept warm by provisioned concurrency,
    at its lower duration price; the rest ran on demand (one request in all, as `lambda_cost_usd`
    bills a drill's workers). The provisioned environments cost their standing price for every
    second of the run, used or not: that is what keeps a burst's first workers warm.
    """
    if provisioned < 0:
        raise ConfigError(f"the provisioned environments must be >= 0, got {provisioned}")
    gb = memory_mb / MB_PER_GB
    on_provisioned = sum(min(w, provisioned) for w in workers_by_second)
    on_demand = sum(w for w in workers_by_second) - on_provisioned
    standing = provisioned * len(workers_by_second) * gb * prices.provisioned_usd_per_gb_s(arch)
    used = on_provisioned * gb * prices.provisioned_duration_usd_per_gb_s(arch)
    return lambda_cost_usd(1, memory_mb, on_demand, prices=prices, arch=arch) + standing + used


def vm_cost_usd(vms: int, seconds: float, *, prices: Prices) -> float:
    """What `vms` VMs of `prices.vm_type` cost running `seconds` each (per-second billing, 60 s minimum)."""
    if vms < 0:
        raise ConfigError(f"the VM count must be >= 0, got {vms}")
    _positive("seconds", seconds, allow_zero=True)
    billed = _billed(seconds, prices.vm_billing_increment_s, prices.vm_minimum_billed_s)
    return vms * billed * prices.vm_usd_per_s


def stream_cost_usd(shards: int, seconds: float, records: int, *, prices: Prices) -> float:
    """What a Kinesis stream of `shards` shards costs over `seconds` (its shard-hours, prorated) with
    `records` put into it (one PUT payload unit each: a NEXMark event is far below 25 KB)."""
    if shards < 0 or records < 0:
        raise ConfigError(f"a stream's shards and records must be >= 0, got {shards} and {records}")
    _positive("seconds", seconds, allow_zero=True)
    shards_usd = shards * seconds / 3600.0 * prices.kinesis_usd_per_shard_hour
    return shards_usd + records / 1e6 * prices.kinesis_usd_per_million_put_units


def vms_for_lambda_cores(lambda_cores: int, rho: float, cores_per_vm: int) -> int:
    """VMs that carry the load of `lambda_cores` at the same CPU target.

    rho is a Lambda core's capacity in VM cores, as in policy/equations.py (Eq. 3 sizes Lambda cores
    as m_o / (0.7 * rho * r_pc)), so L Lambda cores do the work of L * rho VM cores.
    """
    if rho <= 0 or not math.isfinite(rho):
        raise ConfigError(f"rho must be positive, got {rho}", hint="profile it first (bench/offload.py)")
    if cores_per_vm < 1:
        raise ConfigError(f"cores per VM must be >= 1, got {cores_per_vm}")
    if lambda_cores <= 0:
        return 0
    return math.ceil(lambda_cores * rho / cores_per_vm - 1e-9)


@dataclass(frozen=True)
class PersistentBurstConfig:
    """How a persistent burst is handed to VMs; the numbers a policy operator would tune.

    launch_delay_s: from the request to a usable executor (the drills' --vm-launch-delay, default 25 s).
    handover_s: Lambdas kept after the VMs are up, while load (and state) moves to them.
    remaining_factor: with no forecast, the burst is expected to last this many times its age again.
    hysteresis: buy when VMs cost <= (1 - h) x Lambdas; once buying, keep buying while <= (1 + h) x.
    invocation_s: how long one worker invocation lasts before the agent re-invokes it (Lambda's 15 min
    maximum); it sets the request count.
    """

    launch_delay_s: float = 25.0
    handover_s: float = 5.0
    lambda_memory_mb: int = 1769
    lambda_arch: str = "x86_64"
    cores_per_lambda: int = 1
    remaining_factor: float = 1.0
    hysteresis: float = 0.2
    invocation_s: float = 900.0

    def __post_init__(self) -> None:
        _positive("launch_delay_s", self.launch_delay_s, allow_zero=True)
        _positive("handover_s", self.handover_s, allow_zero=True)
        _positive("remaining_factor", self.remaining_factor)
        _positive("invocation_s", self.invocation_s)
        if not 0 <= self.hysteresis < 1:
            raise ConfigError(
                f"hysteresis must be in [0, 1), got {self.hysteresis}", hint="0.2 is a 20 % band"
            )
        if self.cores_per_lambda < 1:
            raise ConfigError(f"cores per Lambda must be >= 1, got {self.cores_per_lambda}")
        if self.lambda_arch not in ARCHITECTURES:
            raise ConfigError(
                f"unknown Lambda architecture {self.lambda_arch!r}", hint=f"one of {', '.join(ARCHITECTURES)}"
            )
        if not LAMBDA_MIN_MB <= self.lambda_memory_mb <= LAMBDA_MAX_MB:
            raise ConfigError(
                f"Lambda memory must be {LAMBDA_MIN_MB}-{LAMBDA_MAX_MB} MB, got {self.lambda_memory_mb}",
                hint="1769 MB gives one full vCPU",
            )


@dataclass(frozen=True)
class VmDecision:
    """A decision with everything it was made from, so the policy log can replay it.

    horizon_s: the remaining burst duration the costs are computed over. lambda_usd: keep renting
    Lambdas for the horizon. vm_usd: launch `vms` VMs now, bridged by Lambdas until they take over.
    breakeven_s: the remaining duration above which VMs are cheaper (inf: never, at these prices).
    """

    buy: bool
    vms: int
    lambda_cores: int
    burst_elapsed_s: float
    horizon_s: float
    lambda_usd: float
    vm_usd: float
    breakeven_s: float
    reason: str


def _lambda_rate(lambda_cores: int, config: PersistentBurstConfig, prices: Prices) -> float:
    workers = math.ceil(lambda_cores / config.cores_per_lambda)
    return workers * config.lambda_memory_mb / MB_PER_GB * prices.lambda_usd_per_gb_s(config.lambda_arch)


def breakeven_remaining_s(
    lambda_cores: int, vms: int, *, prices: Prices, config: PersistentBurstConfig
) -> float:
    """The remaining burst duration R at which launching `vms` VMs costs as much as keeping the Lambdas.

    Lambda path: lam * R. VM path: lam * (D + H) (the Lambdas bridge the launch delay D and the
    handover H) + vm * max(minimum, D + R). Both are linear in R past the VM minimum, so R solves
    directly; requests are left out (one per worker per 15 min is a rounding error here).
    """
    lam = _lambda_rate(lambda_cores, config, prices)
    vm = vms * prices.vm_usd_per_s
    d, h = config.launch_delay_s, config.handover_s
    if lam <= 0:
        return math.inf
    bridge = lam * (d + h)
    # Region where the VMs are billed their minimum: lam * R = bridge + vm * minimum.
    r_min = (bridge + vm * prices.vm_minimum_billed_s) / lam
    if d + r_min <= prices.vm_minimum_billed_s:
        return max(r_min, d + h)
    if lam <= vm:
        return math.inf
    return max((bridge + vm * d) / (lam - vm), d + h)


def cheaper_to_buy_vms(
    burst_elapsed_s: float,
    lambda_cores: int,
    *,
    rho: float,
    prices: Prices,
    config: PersistentBurstConfig,
    buying: bool = False,
    vms: int | None = None,
    expected_remaining_s: float | None = None,
) -> VmDecision:
    """Should the policy launch VMs for a burst that has lasted `burst_elapsed_s` and needs `lambda_cores`?

    `vms` defaults to the VMs that carry the same load (`vms_for_lambda_cores`); pass the M/M/k count
    (policy/queueing.py) instead when it is known. `expected_remaining_s` defaults to
    `remaining_factor * burst_elapsed_s` (ski rental). `buying` is the previous decision: the margin
    needed to switch is `hysteresis` on either side, so a decision holds while the inputs wobble.
    """
    _positive("burst_elapsed_s", burst_elapsed_s, allow_zero=True)
    if lambda_cores < 0:
        raise ConfigError(f"the Lambda core count must be >= 0, got {lambda_cores}")
    n_vms = vms_for_lambda_cores(lambda_cores, rho, prices.vm_cores) if vms is None else vms
    if n_vms < 0:
        raise ConfigError(f"the VM count must be >= 0, got {n_vms}")
    if expected_remaining_s is None:
        horizon = config.remaining_factor * burst_elapsed_s
    else:
        _positive("expected_remaining_s", expected_remaining_s, allow_zero=True)
        horizon = expected_remaining_s
    if lambda_cores == 0 or n_vms == 0:
        return VmDecision(
            False,
            0,
            lambda_cores,
            burst_elapsed_s,
            horizon,
            0.0,
            0.0,
            math.inf,
            "no Lambda load to hand over",
        )
    workers = math.ceil(lambda_cores / config.cores_per_lambda)
    mem, arch = config.lambda_memory_mb, config.lambda_arch

    def requests(seconds: float) -> int:
        return workers * math.ceil(seconds / config.invocation_s) if seconds > 0 else 0

    lambda_usd = lambda_cost_usd(workers, mem, horizon, requests(horizon), prices=prices, arch=arch)
    bridge_s = min(horizon, config.launch_delay_s + config.handover_s)
    vm_usd = lambda_cost_usd(workers, mem, bridge_s, requests(bridge_s), prices=prices, arch=arch)
    vm_usd += vm_cost_usd(n_vms, config.launch_delay_s + horizon, prices=prices)
    limit = (1 + config.hysteresis) if buying else (1 - config.hysteresis)
    buy = lambda_usd > 0 and vm_usd <= limit * lambda_usd
    breakeven = breakeven_remaining_s(lambda_cores, n_vms, prices=prices, config=config)
    ratio = vm_usd / lambda_usd if lambda_usd > 0 else math.inf
    side = "keep" if buying else "start"
    reason = (
        f"{side} buying: {n_vms} VMs cost {ratio:.2f}x the Lambdas over {horizon:.0f} s "
        f"({'<=' if buy else '>'} {limit:.2f}x)"
    )
    return VmDecision(
        buy, n_vms, lambda_cores, burst_elapsed_s, horizon, lambda_usd, vm_usd, breakeven, reason
    )


@dataclass(frozen=True)
class DailySetup:
    """The Fig. 15(b) comparison: Sponge's base VMs plus Lambdas while bursting, vs static VM fleets.

    Defaults are the paper's setup: 5 x r5.xlarge, up to 200 Lambdas of 1769 MB, 20 and 25 static VMs.
    """

    base_vms: int = 5
    burst_lambdas: int = 200
    lambda_memory_mb: int = 1769
    lambda_arch: str = "x86_64"
    invocation_s: float = 900.0
    static_vms: tuple[int, ...] = (20, 25)

    def __post_init__(self) -> None:
        if self.base_vms < 0 or self.burst_lambdas < 0 or any(n < 0 for n in self.static_vms):
            raise ConfigError("VM and Lambda counts must be >= 0")
        _positive("invocation_s", self.invocation_s)
        if self.lambda_arch not in ARCHITECTURES:
            raise ConfigError(
                f"unknown Lambda architecture {self.lambda_arch!r}", hint=f"one of {', '.join(ARCHITECTURES)}"
            )


@dataclass(frozen=True)
class DailyCost:
    """USD per day at one burst share; `static_usd` maps a static VM count to its daily cost."""

    burst_fraction: float
    sponge_usd: float
    static_usd: Mapping[int, float] = field(default_factory=dict)


def daily_cost(burst_fraction: float, setup: DailySetup, *, prices: Prices) -> DailyCost:
    """Cost of one day in which bursts last `burst_fraction` of the time (0.01 = 14.4 minutes)."""
    if not 0 <= burst_fraction <= 1:
        raise ConfigError(f"the burst share of a day must be in [0, 1], got {burst_fraction}")
    burst_s = burst_fraction * SECONDS_PER_DAY
    requests = setup.burst_lambdas * math.ceil(burst_s / setup.invocation_s) if burst_s > 0 else 0
    sponge = vm_cost_usd(setup.base_vms, SECONDS_PER_DAY, prices=prices) + lambda_cost_usd(
        setup.burst_lambdas, setup.lambda_memory_mb, burst_s, requests, prices=prices, arch=setup.lambda_arch
    )
    static = {n: vm_cost_usd(n, SECONDS_PER_DAY, prices=prices) for n in setup.static_vms}
    return DailyCost(burst_fraction, sponge, static)


def daily_cost_curve(
    burst_fractions: Sequence[float], setup: DailySetup, *, prices: Prices
) -> list[DailyCost]:
    """Fig. 15(b): cost per day against the share of the day the burst lasts."""
    return [daily_cost(f, setup, prices=prices) for f in burst_fractions]


def crossover_fraction(static_vms: int, setup: DailySetup, *, prices: Prices) -> float:
    """The burst share of a day above which Sponge costs more than `static_vms` static VMs.

    Sponge's daily cost rises monotonically with the share, so bisection finds it; 0.0 when Sponge is
    never cheaper, inf when it is always cheaper (even bursting all day).
    """
    target = vm_cost_usd(static_vms, SECONDS_PER_DAY, prices=prices)

    def sponge(f: float) -> float:
        return daily_cost(f, setup, prices=prices).sponge_usd

    if sponge(0.0) >= target:
        return 0.0
    if sponge(1.0) <= target:
        return math.inf
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if sponge(mid) <= target else (lo, mid)
    return (lo + hi) / 2

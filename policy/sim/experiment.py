"""A simulated drill: one query, one burst pattern, several policies; their report and the Q1-Q8 summary.

Why here and not in the CLI: the report dict is the drill's report.json schema (core/drill/report.py),
so `write_report(..., label="simulated")` renders it exactly like a measured drill, and the tests call
these functions without a terminal. Costs are priced with policy/cost_model.py over the trace.
"""

from __future__ import annotations

import itertools
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from core import latency as drill_latency
from core.errors import ConfigError
from core.nexmark.patterns import BurstPattern
from policy.cost_model import (
    DailySetup,
    PersistentBurstConfig,
    Prices,
    crossover_fraction,
    daily_cost_curve,
    lambda_cost_usd,
    vm_cost_usd,
)
from policy.equations import lambda_cores
from policy.offload_policy import Decision, PolicyConfig
from policy.persistent_burst import PersistentBurstRule
from policy.sim import metrics
from policy.sim.costs import BaselineCosts, MeasuredCosts, PaperScale, QueryProfile, query_profile
from policy.sim.engine import EngineConfig, RunResult, run
from policy.sim.strategies import (
    SfBaseStrategy,
    SpongeStrategy,
    StaticStrategy,
    VmScalingStrategy,
    vms_for,
)

POLICIES = ("sponge", "noscaling", "vmbase", "sfbase", "vminit", "over")
LABEL = "simulated"
# The paper's headline figures (abstract, 6.2): p99 reduction vs VMBase and SFBase, cost vs Over.
PAPER = {"p99_vs_vmbase": 0.88, "p99_vs_sfbase": 0.70, "cost_vs_over": -0.83}
WARM_PING_INTERVAL_S = 300.0  # one keep-warm request per warm worker every 5 minutes (4.4)


@dataclass(frozen=True)
class SimConfig:
    """One simulated drill's settings; defaults are the paper's Fig. 9(a)/10 setup at 5x."""

    pattern: str = "sudden:5x:60s"
    duration_s: float = 240.0
    lead_s: float = 60.0
    dt: float = 0.1
    deadline_s: float = 2.0  # the policy's recovery deadline (its default: a 2 s window slide)
    warm_factor: float = 5.0  # warm workers for this multiple of the stable load (4.4)
    vm_latency_s: float = 0.5  # assumption: a record's time in a micro-batch once pulled
    rho: float | None = None  # override the measured rho (1.0: Lambda core = VM core, as in the paper)
    vm_handover: bool = True  # sponge hands a persistent burst to new VMs (ADR 0007)
    measured: MeasuredCosts = field(default_factory=MeasuredCosts)
    scale: PaperScale = field(default_factory=PaperScale)
    baseline: BaselineCosts = field(default_factory=BaselineCosts)
    prices: Prices = field(default_factory=Prices)
    # PolicyConfig fields to set other than their defaults (e.g. {"trigger_periods": 1, "period_s": 1.0}),
    # for comparing a knob's settings on the same trace; checked by PolicyConfig when the run starts.
    policy: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        BurstPattern.parse(self.pattern)  # refuses a bad spec with the pattern's own hint
        fixed = {"per_core_rate", "rho", "deadline_s", "max_workers", "offload_cost"}
        if unknown := sorted(set(self.policy) - (set(PolicyConfig.__dataclass_fields__) - fixed)):
            raise ConfigError(
                f"SimConfig.policy names {unknown}, which the simulation does not let you set",
                hint="per_core_rate, rho and offload_cost come from the query's profile",
            )
        if self.duration_s <= 0 or self.lead_s < 10 or self.lead_s >= self.duration_s:
            raise ConfigError(
                "the trace needs a lead-in of at least 10 s inside a positive duration",
                hint="e.g. --duration 240 with the default 60 s lead-in",
            )
        if self.warm_factor < 0 or self.deadline_s <= 0 or self.vm_latency_s < 0:
            raise ConfigError("warm_factor and vm_latency_s must be >= 0 and deadline_s > 0")


def _arrivals(profile: QueryProfile, config: SimConfig) -> tuple[Any, list[float]]:
    trace = BurstPattern.parse(config.pattern).trace(profile.stable_rate, config.duration_s, config.lead_s)
    steps = round(config.duration_s / config.dt)
    counts = [float(trace.schedule.events_by(i * config.dt)) for i in range(steps + 1)]
    return trace, [b - a for a, b in itertools.pairwise(counts)]


def policy_config(profile: QueryProfile, config: SimConfig) -> PolicyConfig:
    """The live policy's configuration at paper scale: the profiled per-core rate, rho and offload cost,
    the router's chunk as the simulator sends it (`MeasuredCosts.chunk_rows`) and `config.policy`."""
    base = PolicyConfig(
        per_core_rate=profile.per_core_rate,
        rho=profile.rho,
        deadline_s=config.deadline_s,
        max_workers=config.scale.max_workers,
        offload_cost=profile.sponge_vm_cost,
        chunk_events=config.measured.chunk_rows,
    )
    return replace(base, **config.policy)


def vm_rule(profile: QueryProfile, config: SimConfig) -> PersistentBurstRule:
    """Sponge's persistent-burst rule at paper scale: VMs ready after the paper's launch and JVM start
    (ADR 0007: the launch delay the cost rule assumes is the whole wait for a usable executor)."""
    base, scale = config.baseline, config.scale
    burst = PersistentBurstConfig(
        launch_delay_s=base.vm_launch_s + base.jvm_start_s, lambda_memory_mb=scale.lambda_memory_mb
    )
    return PersistentBurstRule(
        burst,
        config.prices,
        per_core_rate=profile.per_core_rate,
        rho=profile.rho,
        cores_per_vm=scale.cores_per_vm,
        base_vms=scale.vms,
        max_new_vms=scale.max_new_vms,
    )


def warm_workers(profile: QueryProfile, config: SimConfig) -> int:
    """Workers that carry `warm_factor` x the stable load at the CPU target (4.4), within the cap."""
    cores = lambda_cores(config.warm_factor * profile.stable_rate, profile.per_core_rate, profile.rho)
    return min(config.scale.max_workers, cores)


@dataclass
class QueryRuns:
    """The runs of one query, the report dict and Sponge's decisions (sfbase replays them)."""

    profile: QueryProfile
    report: dict[str, Any]
    results: dict[str, RunResult]
    decisions: list[Decision]


def _cost(result: RunResult, profile: QueryProfile, config: SimConfig, warm: int) -> float:
    horizon = config.duration_s
    cl = result.cluster
    usd = sum(
        vm_cost_usd(g.vms, max(min(horizon, g.released_at) - g.billed_from, 0.0), prices=config.prices)
        for g in cl.groups
        if g.billed_from < horizon
    )
    pings = warm * math.ceil(horizon / WARM_PING_INTERVAL_S) if result.policy in ("sponge", "sfbase") else 0
    seconds = cl.worker_seconds + pings * config.measured.warm_start_s
    if seconds > 0:
        usd += lambda_cost_usd(
            1, config.scale.lambda_memory_mb, seconds, cl.worker_starts + pings, prices=config.prices
        )
    return usd


def _notes(log: Sequence[tuple[float, str, str]], limit: int = 12) -> str:
    """The first `limit` events, always with sponge's VM requests and releases (they come late)."""
    kinds = ("vm-request", "vm-release")
    room = max(limit - sum(1 for e in log if e[1] in kinds), 0)
    kept = []
    for e in log:
        if e[1] in kinds:
            kept.append(e)
        elif room > 0:
            kept.append(e)
            room -= 1
    return "; ".join(f"{t:g}s {kind}: {detail}" for t, kind, detail in kept)


def simulate_query(
    query: str, policies: Sequence[str] = POLICIES, config: SimConfig | None = None
) -> QueryRuns:
    """Run `policies` on one query's trace; sponge always runs (sfbase replays its decisions)."""
    config = config or SimConfig()
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ConfigError(
            f"unknown policies {unknown or policies}", hint=f"choose from {', '.join(POLICIES)}"
        )
    profile = query_profile(query, measured=config.measured, scale=config.scale, rho=config.rho)
    pattern = BurstPattern.parse(config.pattern)
    trace, arrivals = _arrivals(profile, config)
    pcfg = policy_config(profile, config)
    scale, base = config.scale, config.baseline
    warm = warm_workers(profile, config)
    engine = EngineConfig(
        dt=config.dt,
        vms=scale.vms,
        cores_per_vm=scale.cores_per_vm,
        max_workers=scale.max_workers,
        warm_workers=warm,
        epoch_s=config.vm_latency_s,
        cold_start_s=config.measured.cold_start_s,
        warm_start_s=config.measured.warm_start_s,
        period_s=pcfg.period_s,
    )
    peak_vms = vms_for(profile.stable_rate * pattern.factor, profile.per_core_rate, scale.cores_per_vm)
    extra = max(peak_vms - scale.vms, 0)
    latency = metrics.LatencyModel(
        config.vm_latency_s,
        config.measured.dispatch_rtt_s + config.measured.chunk_rows / profile.lambda_rate,
    )

    def go(strategy: Any) -> RunResult:
        return run(
            strategy, profile, arrivals, engine, jit_floor=base.jit_floor, jit_warmup_s=base.jit_warmup_s
        )

    sponge = SpongeStrategy(
        pcfg,
        vm_rule(profile, config) if config.vm_handover else None,
        vm_ready_s=base.vm_launch_s + base.jvm_start_s,
    )
    results = {"sponge": go(sponge)}
    builders = {
        "noscaling": lambda: StaticStrategy("noscaling"),
        "over": lambda: StaticStrategy("over", extra),
        "vmbase": lambda: VmScalingStrategy("vmbase", pcfg, base, max_new_vms=scale.max_new_vms),
        "vminit": lambda: VmScalingStrategy("vminit", pcfg, base, prestarted_vms=extra),
        "sfbase": lambda: SfBaseStrategy(sponge.decisions, base),
    }
    for name in policies:
        if name != "sponge":
            results[name] = go(builders[name]())
    seconds = int(config.duration_s)
    windows = list(trace.bursts)
    after = config.duration_s  # the peak counts the drain after the burst, to the trace's end
    runs = []
    for name in policies:
        r = results[name]
        p99 = metrics.p99_by_second(r, latency, seconds)
        per_s = engine.steps_per_s
        s = r.series
        runs.append(
            {
                "policy": name,
                "peak_p99_ms": drill_latency.peak(p99, windows, after),
                "mean_p99_ms_during_burst": drill_latency.mean(p99, windows),
                "reaction_s": metrics.reaction_s(r, windows[0][0]) if windows else None,
                "recovery_s": metrics.recovery_s(p99, windows, config.lead_s),
                "lambda_worker_seconds": round(r.cluster.worker_seconds, 1),
                "cost_usd": round(_cost(r, profile, config, warm), 6),
                "results_match_reference": None,  # not applicable: nothing is computed in simulation
                "events": round(s.arrived[-1]),
                "events_processed": round(s.pulled[-1] - s.to_lambda[-1] + s.lambda_done[-1]),
                "drained_at_s": round(len(s.arrived) * r.dt, 1),
                "notes": _notes(r.cluster.log),
                "p99_ms_by_second": p99,
                "vm_cpu_by_second": metrics.per_second_mean(s.busy, per_s, seconds),
                "workers_by_second": metrics.per_second_mean(s.workers, per_s, seconds, 1),
                "offload_share_by_second": metrics.per_second_mean(s.share, per_s, seconds),
                "vm_cores_by_second": metrics.per_second_mean(s.vm_cores, per_s, seconds, 1),
            }
        )
        if name == "sponge" and config.vm_handover:
            runs[-1]["vm_requests"] = [
                {"t": q.t, "add": q.add, "release": q.release, "servers": q.servers, "reason": q.reason}
                for q in sponge.vm_requests
            ]
    report = {
        "query": profile.query,
        "pattern": pattern.text(),
        "duration_s": config.duration_s,
        "target": f"{LABEL}: {scale.vms} VMs x {scale.cores_per_vm} cores, up to {scale.max_workers} Lambdas",
        "stable_rate": profile.stable_rate,
        "burst": [{"start_s": a, "end_s": b} for a, b in windows],
        "generated_at": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "label": LABEL,
        "profile": {
            "per_core_rate": round(profile.per_core_rate, 1),
            "rho": round(profile.rho, 3),
            "router_cost": round(profile.router_cost, 4),
            "merge_cost": profile.merge_cost,
            "sf_residual": round(profile.sf_residual, 4),
            "state_gb": profile.state_gb,
            "warm_workers": warm,
            "over_vms": scale.vms + extra,
            "source": profile.source,
        },
        "runs": runs,
        "rate_by_second": trace.rate_by_second(),
    }
    return QueryRuns(profile, report, results, sponge.decisions)


def _reduction(sponge: float | None, other: float | None) -> float | None:
    return 1 - sponge / other if sponge is not None and other else None


def summary_row(report: dict[str, Any]) -> dict[str, Any]:
    """Sponge's peak p99 reduction vs VMBase and SFBase, and its cost relative to Over, for one query."""
    runs = {r["policy"]: r for r in report["runs"]}

    def get(policy: str, key: str) -> float | None:
        return runs.get(policy, {}).get(key)

    sponge_cost, over_cost = get("sponge", "cost_usd"), get("over", "cost_usd")
    return {
        "query": report["query"],
        "peak_p99_ms": {p: r["peak_p99_ms"] for p, r in runs.items()},
        "p99_vs_vmbase": _reduction(get("sponge", "peak_p99_ms"), get("vmbase", "peak_p99_ms")),
        "p99_vs_sfbase": _reduction(get("sponge", "peak_p99_ms"), get("sfbase", "peak_p99_ms")),
        "cost_vs_over": sponge_cost / over_cost - 1 if sponge_cost is not None and over_cost else None,
    }


def mean_of(rows: Sequence[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in rows if r.get(key) is not None]
    return sum(values) / len(values) if values else None


def cost_curve(prices: Prices | None = None, points: int = 101) -> dict[str, Any]:
    """Fig. 15(b): USD per day against the share of the day spent bursting, Sponge vs 20 and 25 VMs.

    Sponge is the paper's setup (5 VMs always, 200 single-core 1769 MB Lambdas while bursting), priced by
    policy/cost_model.py; the crossovers are where Sponge stops being cheaper.
    """
    prices = prices or Prices()
    setup = DailySetup()
    fractions = [i / (points - 1) for i in range(points)]
    curve = daily_cost_curve(fractions, setup, prices=prices)
    return {
        "label": LABEL,
        "setup": {
            "base_vms": setup.base_vms,
            "burst_lambdas": setup.burst_lambdas,
            "lambda_memory_mb": setup.lambda_memory_mb,
            "static_vms": list(setup.static_vms),
        },
        "burst_fraction": fractions,
        "sponge_usd_per_day": [round(c.sponge_usd, 4) for c in curve],
        "static_usd_per_day": {str(n): [round(c.static_usd[n], 4) for c in curve] for n in setup.static_vms},
        "crossover_fraction": {str(n): crossover_fraction(n, setup, prices=prices) for n in setup.static_vms},
    }

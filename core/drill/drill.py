"""A burst drill: one trace, several scaling policies one after another, one report.

Why one invocation for all policies: this machine is shared and noisy, so policies are only
comparable when measured on the same trace, back to back. Each policy runs in its own process
(core/drill/run_policy.py) with the VM side pinned to `vm_cpus` and the agent and its Lambda workers
pinned to `worker_cpus`; Over gets every core for the VMs.

The stable rate is chosen so the VM side runs at ~70 % CPU: a short paced probe measures the CPU at a
known rate (the CPU grows about linearly with the rate in a stable period) and scales it. The probe's
result is kept in the report directory and reused for the same query and window.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core.drill import latency
from core.drill.patterns import BurstPattern, Trace
from core.drill.run_policy import PolicyRun
from core.errors import ConfigError, SpongeError
from core.nexmark.schedule import RateSchedule

POLICIES = ("sponge", "noscaling", "over")
PLANNED = ("vmbase", "sfbase", "vminit")  # issue 4, not built yet: refused with a clear message
PROBE_RATE = 20_000.0
PROBE_S = 20.0
TARGET_CPU = 0.7
DEFAULT_RHO = {"q1": 7.7, "q5": 19.6}  # bench.offload on this machine (worker / VM bids per core)
LAMBDA_MEMORY_MB = 1769


@dataclass(frozen=True)
class DrillConfig:
    query: str = "q5"
    pattern: str = "sudden:2x:30s"
    duration_s: float = 90.0
    lead_s: float = 30.0  # the query's first epoch (planning, state stores) falls in the lead-in
    policies: tuple[str, ...] = ("sponge", "noscaling", "over")
    target: str = "embedded"
    report: Path = Path("runs/drill")
    seed: int = 0
    stable_rate: float | None = None  # None: probe for ~70 % VM CPU
    max_workers: int = 4
    vm_cpus: tuple[int, ...] = (0,)
    worker_cpus: tuple[int, ...] = (1,)
    check_reference: bool = True
    window_size_s: int = 10
    window_slide_s: int = 2

    def __post_init__(self) -> None:
        BurstPattern.parse(self.pattern)
        for p in self.policies:
            if p in PLANNED:
                raise ConfigError(f"policy {p!r} is not built yet", hint=f"use {', '.join(POLICIES)}")
            if p not in POLICIES:
                raise ConfigError(f"unknown policy {p!r}", hint=f"use {', '.join(POLICIES)}")
        if self.target not in ("embedded", "localstack", "aws"):
            raise ConfigError(f"unknown target {self.target!r}", hint="use embedded, localstack or aws")
        cores = os.cpu_count() or 1
        if max((*self.vm_cpus, *self.worker_cpus)) >= cores:
            raise ConfigError(f"this machine has {cores} cores; pass CPU sets within 0..{cores - 1}")


def run_drill(config: DrillConfig, status: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every policy on the same trace; returns the report dict (see core/drill/report.py)."""
    config.report.mkdir(parents=True, exist_ok=True)
    pattern = BurstPattern.parse(config.pattern)
    rate = config.stable_rate or probe_stable_rate(config, status)
    trace = pattern.trace(rate, config.duration_s, config.lead_s)
    per_core = rate / TARGET_CPU / len(config.vm_cpus)
    reference = _reference(config, trace) if config.check_reference else None
    runs = []
    for policy in config.policies:
        status(
            f"{policy}: {trace.events:,} events, {config.duration_s:g} s of {trace.pattern} on {rate:,.0f}/s"
        )
        result = _run_child(_spec(config, policy, trace, per_core), config.report / policy, status)
        runs.append(_summarise(config, policy, trace, result, reference))
    return {
        "query": config.query,
        "pattern": trace.pattern,
        "duration_s": config.duration_s,
        "target": config.target,
        "stable_rate": rate,
        "burst": [{"start_s": a, "end_s": b} for a, b in trace.bursts],
        "rate_by_second": trace.rate_by_second(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["sponge", *sys.argv[1:]]) if sys.argv[0].endswith("sponge") else "",
        "runs": runs,
    }


def probe_stable_rate(config: DrillConfig, status: Callable[[str], None]) -> float:
    """The rate at which the VM side runs at ~70 % CPU (cached per query and window)."""
    cache = config.report / f"calibration-{config.query}.json"
    key = {
        "query": config.query,
        "vm_cpus": list(config.vm_cpus),
        "window": [config.window_size_s, config.window_slide_s],
    }
    if cache.exists():
        saved = json.loads(cache.read_text())
        if saved.get("key") == key:
            status(f"stable rate {saved['rate']:,.0f}/s from {cache} (delete it to probe again)")
            return float(saved["rate"])
    status(f"probing the VM side's CPU at {PROBE_RATE:,.0f} events/s for {PROBE_S:g} s ...")
    trace = Trace("probe", PROBE_RATE, PROBE_S, RateSchedule.constant(PROBE_RATE), ())
    result = _run_child(_spec(config, "probe", trace, 1.0), config.report / "probe", status)
    cpu = [s["observation"]["cpu"] for s in result["samples"][len(result["samples"]) // 2 :]]
    cpu = [c for c in cpu if c is not None]
    if not cpu:
        raise SpongeError("the CPU probe measured nothing", hint="pass --rate to set the stable rate")
    mean_cpu = max(sum(cpu) / len(cpu), 0.05)
    rate = round(PROBE_RATE * TARGET_CPU / mean_cpu, -2)
    cache.write_text(json.dumps({"key": key, "rate": rate, "probe_cpu": mean_cpu}))
    status(f"VM CPU {mean_cpu:.0%} at {PROBE_RATE:,.0f}/s: stable rate {rate:,.0f}/s")
    return rate


def _spec(config: DrillConfig, policy: str, trace: Trace, per_core: float) -> PolicyRun:
    over = policy == "over"
    vm_cpus = sorted({*config.vm_cpus, *config.worker_cpus}) if over else list(config.vm_cpus)
    return PolicyRun(
        policy=policy,
        query=config.query,
        events=trace.events,
        seed=config.seed,
        schedule=trace.schedule.text(),
        output=str(config.report / policy / "output"),
        master=f"local[{2 * len(vm_cpus)},4]",
        vm_cpus=vm_cpus,
        worker_cpus=list(config.worker_cpus),
        offload=policy == "sponge",
        target=config.target,
        controlled=policy == "sponge",
        max_workers=config.max_workers,
        prewarm=config.max_workers if policy == "sponge" else 0,
        per_core_rate=per_core,
        rho=DEFAULT_RHO.get(config.query, 5.0),
        deadline_s=float(config.window_slide_s),
        window_size_s=config.window_size_s,
        window_slide_s=config.window_slide_s,
    )


def _run_child(spec: PolicyRun, directory: Path, status: Callable[[str], None]) -> dict[str, Any]:
    directory.mkdir(parents=True, exist_ok=True)
    spec_path, result_path, log_path = (
        directory / "spec.json",
        directory / "result.json",
        directory / "run.log",
    )
    spec_path.write_text(json.dumps(asdict(spec)))
    result_path.unlink(missing_ok=True)
    started = time.time()
    with open(log_path, "w") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "core.drill.run_policy", str(spec_path), str(result_path)],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        while proc.poll() is None:
            time.sleep(1.0)
            status(f"{spec.policy}: {time.time() - started:.0f} s")
    if proc.returncode != 0 or not result_path.exists():
        tail = "".join(log_path.read_text().splitlines(keepends=True)[-5:])
        raise SpongeError(
            f"the {spec.policy} run failed (exit {proc.returncode}): {tail.strip()}", hint=f"see {log_path}"
        )
    return json.loads(result_path.read_text())


def _reference(config: DrillConfig, trace: Trace) -> Any:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.params import QueryParams
    from core.nexmark.reference import reference_for

    gen = GeneratorConfig(seed=config.seed, events=trace.events, schedule=trace.schedule)
    return reference_for(config.query, gen, QueryParams(config.window_size_s, config.window_slide_s))


def _summarise(
    config: DrillConfig, policy: str, trace: Trace, result: dict[str, Any], reference: Any
) -> dict[str, Any]:
    from core.results import diff_results, read_results
    from policy.cost_model import Prices, lambda_cost_usd, vm_cost_usd

    origin = result["origin"]
    epochs = [latency.Epoch(**e) for e in result["epochs"]]
    series = latency.per_second(epochs, trace.schedule, origin, trace.duration_s, trace.events)
    samples = result["samples"]
    seconds = int(trace.duration_s)

    def by_second(pick: Callable[[dict[str, Any]], float | None]) -> list[float | None]:
        out: list[float | None] = [None] * seconds
        for s in samples:
            t = int(s["observation"]["t"])
            if 0 <= t < seconds:
                out[t] = pick(s)
        return out

    workers = by_second(lambda s: s["gauges"].get("workers_connected", 0))
    share = by_second(lambda s: s["decision"]["share"] if s["decision"] else 0.0)
    worker_s = float(sum(w or 0 for w in workers))
    vm_cores = len(config.vm_cpus) + (len(config.worker_cpus) if policy == "over" else 0)
    prices = Prices()
    cost = lambda_cost_usd(1, LAMBDA_MEMORY_MB, worker_s, prices=prices) + vm_cost_usd(
        vm_cores / 4, trace.duration_s, prices=prices
    )
    output = config.report / policy / "output"
    match = None if reference is None else diff_results(read_results(output), reference) is None
    return {
        "policy": policy,
        "peak_p99_ms": latency.peak(series.p99_ms, trace.bursts, after_s=config.window_slide_s),
        "mean_p99_ms_during_burst": latency.mean(series.p99_ms, trace.bursts),
        "p99_ms_by_second": series.p99_ms,
        "p50_ms_by_second": series.p50_ms,
        "reaction_s": _reaction(result, trace, output / "_offload"),
        "recovery_s": latency.recovery_s(series.p99_ms, trace.bursts, config.lead_s),
        "lambda_worker_seconds": worker_s,
        "cost_usd": round(cost, 6),
        "results_match_reference": match,
        "vm_cpu_by_second": by_second(lambda s: s["observation"]["cpu"]),
        "workers_by_second": workers,
        "offload_share_by_second": share,
        "vm_cores_by_second": [vm_cores] * seconds,
        "events": trace.events,
        "wall_s": result["summary"]["wall_s"],
        "records_offloaded": result["summary"].get("records_offloaded", 0),
        "notes": _notes(result),
    }


def _reaction(result: dict[str, Any], trace: Trace, directory: Path) -> float | None:
    """Burst onset to the start of the first epoch that sent records to workers (from the routing log)."""
    from router.routing_log import RoutingLog

    if not trace.bursts or not directory.exists():
        return None
    onset = result["origin"] + trace.bursts[0][0]
    spans = []  # [from, to) offsets some plan offloaded
    for stream in RoutingLog.streams(directory):
        segments = RoutingLog(directory, stream).segments()
        for k, seg in enumerate(segments):
            if seg.plan.offloads:
                spans.append((seg.start, segments[k + 1].start if k + 1 < len(segments) else float("inf")))
    for e in sorted(result["epochs"], key=lambda e: e["started_t"]):
        if e["started_t"] >= onset and any(lo < e["covered"] and hi > e["start"] for lo, hi in spans):
            return round(e["started_t"] - onset, 2)
    return None


def _notes(result: dict[str, Any]) -> str:
    s = result["summary"]
    if not s.get("records_offloaded"):
        return ""
    return (
        f"{s['records_offloaded']:,} records offloaded; {s.get('workers_started', 0)} workers started, "
        f"{s.get('workers_prewarmed', 0)} prewarmed, {s.get('cold_starts', 0)} cold starts"
    )


def policies_from(text: str) -> tuple[str, ...]:
    return tuple(p.strip().lower() for p in text.split(",") if p.strip())

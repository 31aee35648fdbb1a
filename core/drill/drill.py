"""A burst drill: one trace, several scaling policies one after another, one report.

Why one invocation for all policies: this machine is shared and noisy, so policies are only
comparable when measured on the same trace, back to back. The probes and the policies run in turn in
one Spark application, in a child process (core/drill/spark_app.py, docs/adr/0059), with the VM side
pinned to `vm_cpus` and the agent and its Lambda workers pinned to `worker_cpus`; Over's VM is resized
to every core.

VMBase and VMInit run their VMs as workers of a Spark standalone cluster (core/spark/vm_pool.py): the
base VM on `vm_cpus`, the VM they add on `worker_cpus`. Both watch the burst with Sponge's own policy
and react to its trigger by asking for a VM instead of offloading: VMBase's boots for
`vm_launch_delay_s` first, VMInit's was initialised before the trace and only starts its executor
(core/drill/vm_actions.py). Their added VM is billed from the request (VMInit's for the whole trace).

The stable rate is chosen so the VM side runs at ~70 % load, measured as the share of each epoch
spent on records rather than as CPU (core/drill/calibrate.py says why): a probe's small warm-up epochs
and full ones fit the epoch cost T = F + c n, and the stable rate is 70 % of the capacity that
implies. A second probe offloading a fixed share gives what an offloaded event still costs the VM (the
policy's offload_cost); when it reads clearly above a kept event's cost, sponge runs the plain plan
and its policy logs bursts as no-gain (docs/adr/0011, 0062). Both are kept in the report directory
and reused for the same query and window.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from core import latency
from core.ablations import ABLATIONS, BASELINES, moved_by_key
from core.drill.calibrate import (
    PROBE_SCHEDULE,
    PROBE_SHARE,
    PROBE_VERSION,
    Calibration,
    EpochCost,
    UnfittedProbe,
    fit_probe,
    offload_cost,
)
from core.drill.run_policy import PolicyRun
from core.drill.spark_app import SparkApp
from core.drill.steady import LEAD_RAMP_S
from core.errors import ConfigError
from core.kinesis import KinesisEndpoint
from core.nexmark.patterns import BurstPattern, Trace
from core.nexmark.schedule import RateSchedule
from core.offload_plan import DEFAULT_OFFLOAD_COST, share_scale
from core.spark.admission import batch_cap
from core.spark.session import MemoryConfig
from router.agent.warm_pool import DEFAULT_KEEP_WARM_S

POLICIES = ("sponge", "noscaling", "vmbase", "vminit", "over", *ABLATIONS)
VM_SCALING = ("vmbase", "vminit")  # add a VM when the policy detects the burst
OFFLOADING = ("sponge", *ABLATIONS)  # the policy loop's plan moves work to Lambda workers
DEFAULT_RHO = {"q1": 7.7, "q5": 19.6}  # bench.offload on this machine (worker / VM bids per core)
LAMBDA_MEMORY_MB = 1769
CALIBRATION_MEMORY = (
    "driver_memory",
    "executor_memory",
    "state_store",
    "rocksdb_memory",
)  # in a cached probe's key
BATCH_CAP = 200_000  # the source's events per epoch per VM core at a run's start (core/spark/admission.py)
EXECUTORS = 2  # executor JVMs a drill's run can have at once: the base VM's and a VM added at run time
DEFAULT_EXECUTOR_MB = 1024  # a VM's executor heap when --executor-memory is not given (Spark's 1g)


@dataclass(frozen=True)
class DrillConfig:
    query: str = "q5"
    pattern: str = "sudden:2x:30s"
    duration_s: float = 90.0
    lead_s: float = 30.0  # the query's first epoch (planning, state stores) falls in the lead-in
    policies: tuple[str, ...] = ("sponge", "noscaling", "over")
    target: str = "embedded"
    # The sponge policy's agent: where it listens, the host its workers dial, its transport (None: the
    # defaults of core/spark/offload_session.py's OffloadConfig).
    bind: str | None = None
    advertise: str | None = None
    transport: str | None = None
    tls_dir: str | None = None
    report: Path = Path("runs/drill")
    seed: int = 0
    stable_rate: float | None = None  # None: probe for ~70 % VM CPU
    max_workers: int = 4
    rho: float | None = None  # a worker core against a VM core; None: DEFAULT_RHO's measure for the query
    keep_warm_s: float | None = DEFAULT_KEEP_WARM_S  # the sponge policy's keep-warm interval
    vm_cpus: tuple[int, ...] = (0,)
    worker_cpus: tuple[int, ...] = (1,)
    check_reference: bool = True
    window_size_s: int = 10
    window_slide_s: int = 2
    vm_launch_delay_s: float = 25.0  # vmbase: from the VM's request to its worker's start (its boot)
    # The JVMs' heaps and the state store of every run (probes included); executor_mb sizes each VM.
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    # Read each run's events from a Kinesis stream of its own (named from this one's stream, a prefix)
    # that a producer process fills at the trace's pace; None: the generator paces them itself.
    kinesis: KinesisEndpoint | None = None

    def __post_init__(self) -> None:
        """Everything a drill can check without running anything is checked here: a drill spends minutes
        on probes and Spark start-ups before it would otherwise reach a bad argument."""
        pattern = BurstPattern.parse(self.pattern)
        burst_s = pattern.length_s
        if self.lead_s < 0 or self.duration_s <= self.lead_s + burst_s:
            # The trace must return to the stable rate after the burst: the report's recovery time and
            # the last seconds' latencies are measured there.
            raise ConfigError(
                f"a {pattern.text()} burst after {self.lead_s:g} s of lead-in does not fit in "
                f"{self.duration_s:g} s with stable time after it",
                hint=f"pass a --duration above {self.lead_s + burst_s:g} s (the lead-in plus the burst), "
                f"e.g. --duration {self.lead_s + burst_s + 30:g}, or shorten --lead or the burst",
            )
        pattern.trace(1.0, self.duration_s, self.lead_s)  # the burst must fit, whatever the rate
        if not self.policies:
            raise ConfigError("no policy to run", hint="name one with --policy, or several with --compare")
        if self.kinesis is not None and not self.stable_rate:
            raise ConfigError(
                "a drill over Kinesis needs --rate: the stream's pace is its producer's, not this machine's",
                hint="pass a rate the stream takes, e.g. --rate 300 on LocalStack (its Kinesis engine puts "
                "a few hundred records a second)",
            )
        for p in self.policies:
            if p not in POLICIES:
                raise ConfigError(f"unknown policy {p!r}", hint=f"use {', '.join(POLICIES)}")
        baselines = [p for p in self.policies if p in ABLATIONS]
        if baselines:
            from core.job import load
            from core.nexmark.params import QueryParams

            plan = load(self.query, QueryParams(self.window_size_s, self.window_slide_s)).plan()
            if not moved_by_key(plan):
                raise ConfigError(
                    f"{baselines[0]} cannot run {self.query} live: without merge operators none of its "
                    "operators' state can move to workers by key group (a window aggregate's panes can: "
                    "Q5's count)",
                    hint=f"`sponge simulate --compare sfbase --query {self.query}` models SFBase",
                )
        if self.target not in ("embedded", "localstack", "aws"):
            raise ConfigError(f"unknown target {self.target!r}", hint="use embedded, localstack or aws")
        if self.target != "embedded":
            from core.deployment import load_deployment

            load_deployment(self.target)  # the stack file sponge deploy wrote, else what to do
        cores = os.cpu_count() or 1
        if max((*self.vm_cpus, *self.worker_cpus)) >= cores:
            raise ConfigError(f"this machine has {cores} cores; pass CPU sets within 0..{cores - 1}")
        if not 0 <= self.vm_launch_delay_s <= 600:
            raise ConfigError(
                f"the VM launch delay must be within 0..600 s, got {self.vm_launch_delay_s:g}",
                hint="25 s is a VM's boot in the paper (6.2)",
            )
        if any(p in VM_SCALING for p in self.policies) and not self.worker_cpus:
            raise ConfigError("vmbase and vminit add a VM on the worker cores; none are set")
        self._check_memory()

    def _check_memory(self) -> None:
        replace(self.memory, executor_mb=self.memory.executor_mb or DEFAULT_EXECUTOR_MB).check_fits(EXECUTORS)
        if self.memory.state_store != "rocksdb":
            from core.job import load
            from core.nexmark.params import QueryParams
            from core.spark.runner import refuse_state_store

            params = QueryParams(self.window_size_s, self.window_slide_s)
            refuse_state_store(load(self.query, params), self.memory.state_store)


def run_drill(config: DrillConfig, status: Callable[[str], None] = print) -> dict[str, Any]:
    """Run every policy on the same trace; returns the report dict (see core/drill/report.py)."""
    config.report.mkdir(parents=True, exist_ok=True)
    pattern = BurstPattern.parse(config.pattern)
    provisioned = provisioned_environments(config.target)
    runs = []
    with SparkApp(config.report) as app:
        calibration = calibrate(config, status, app)
        rate = calibration.rate
        trace = pattern.trace(rate, config.duration_s, config.lead_s, ramp_s=LEAD_RAMP_S)
        per_core = calibration.per_core_rate / len(config.vm_cpus)
        reference = _reference_aside(config, trace) if config.check_reference else None
        for policy in config.policies:
            what = f"{config.duration_s:g} s of {trace.pattern} on {rate:,.0f}/s"
            status(f"{policy}: {trace.events:,} events, {what}")
            # Sponge runs the routed plan only when offloading pays; otherwise its policy watches the
            # plain plan and logs each burst as no-gain (docs/adr/0011).
            routed = policy in OFFLOADING and calibration.offload_pays
            spec = replace(
                _spec(config, policy, trace, per_core, routed),
                offload_cost=calibration.policy_cost,
                epoch_fixed_s=calibration.fixed_s(routed=routed),
            )
            result = app.run(spec, config.report / policy, status)
            expected = reference.result() if reference is not None else None
            runs.append(_summarise(config, spec, trace, result, expected, provisioned))
    return {
        "query": config.query,
        "pattern": trace.pattern,
        "duration_s": config.duration_s,
        "target": config.target,
        "source": "kinesis" if config.kinesis is not None else "generator",
        "stable_rate": rate,
        "calibration": calibration.to_json(),  # the probes' fits ("routed": None: the default offload cost)
        "memory": config.memory.to_json(),
        "burst": [{"start_s": a, "end_s": b} for a, b in trace.bursts],
        "rate_by_second": trace.rate_by_second(),
        "generated_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "command": " ".join(["sponge", *sys.argv[1:]]) if sys.argv[0].endswith("sponge") else "",
        "runs": runs,
    }


def calibrate(config: DrillConfig, status: Callable[[str], None], app: SparkApp) -> Calibration:
    """The stable rate (utilisation 0.7) and the offload cost, from probes cached per query and window.

    Two paced probes (core/drill/calibrate.py): one plain, one offloading a fixed share; each is fitted
    as T = F + c n over its epochs. The second runs only for a drill with sponge in it. `--rate`
    overrides the stable rate and, with nothing cached, skips the probes.
    """
    cache = config.report / f"calibration-{config.query}.json"
    key = calibration_key(config)
    saved = json.loads(cache.read_text()) if cache.exists() else {}
    if saved.get("key") == key:
        found = Calibration.from_json(saved["calibration"])
        status(f"{found.describe()} (from {cache}; delete it to probe again)")
    elif config.stable_rate:  # set by hand: no probes, the default offload cost
        return Calibration(rate=config.stable_rate, offload_cost=DEFAULT_OFFLOAD_COST)
    else:
        plain = _probe(config, "probe", 0.0, status, app)
        found = Calibration(rate=round(plain.stable_rate(BATCH_CAP), -2), offload_cost=0.0, plain=plain)
    if found.routed is None and found.plain is not None and "sponge" in config.policies:
        try:
            routed = _probe(config, "probe-offload", PROBE_SHARE, status, app)
        except UnfittedProbe as e:
            # A machine slow enough for few, long epochs: the stable rate stands, and the offload cost
            # only tunes sponge's share. The routed fit stays unset, so the next drill probes again.
            status(f"{e}: sponge uses the default offload cost ({DEFAULT_OFFLOAD_COST:g} of a kept event)")
            found = replace(found, offload_cost=DEFAULT_OFFLOAD_COST)
        else:
            found = replace(found, routed=routed, offload_cost=offload_cost(found.plain, routed, PROBE_SHARE))
        status(found.describe())
    cache.write_text(json.dumps({"key": key, "calibration": found.to_json()}))
    return replace(found, rate=config.stable_rate) if config.stable_rate else found


def calibration_key(config: DrillConfig) -> dict[str, Any]:
    """What a cached calibration must match to be reused."""
    return {
        "query": config.query,
        "vm_cpus": list(config.vm_cpus),
        "window": [config.window_size_s, config.window_slide_s],
        "probe": PROBE_SCHEDULE,
        "version": PROBE_VERSION,
        # The epochs' cost depends on where state lives and on the heap (GC): a probe measured with
        # other memory settings does not carry over.
        "memory": {k: v for k, v in config.memory.to_json().items() if k in CALIBRATION_MEMORY},
    }


def _probe(
    config: DrillConfig,
    name: str,
    share: float,
    status: Callable[[str], None],
    app: SparkApp,
    steps: str = PROBE_SCHEDULE,
    cap_scale: float = 1.0,
) -> EpochCost:
    """One probe's fit; `steps` and `cap_scale` (its epochs' cap over the drill's) are the drill's
    own but for bench/probe_spread.py, which measures how a probe's noise depends on them."""
    what = f"offloading {share:.0%}" if share else "on the VM alone"
    status(f"probing the VM's epoch cost {what}: paced steps {steps} (seconds:events/s) ...")
    schedule = RateSchedule.parse(steps)
    duration = sum(seg.duration_s for seg in schedule.segments)
    trace = Trace(name, schedule.segments[0].rate_start, duration, schedule, ())
    spec = _spec(config, "probe", trace, 1.0, routed=share > 0)
    spec = replace(
        spec,
        share=share,
        output=str(config.report / name / "output"),  # each probe its own: a routed one leaves a log
        batch_events=int(spec.batch_events * cap_scale),
    )
    result = app.run(spec, config.report / name, status)
    return fit_probe(
        [latency.Epoch(**e) for e in result["warmup_epochs"]], [latency.Epoch(**e) for e in result["epochs"]]
    )


def _spec(config: DrillConfig, policy: str, trace: Trace, per_core: float, routed: bool) -> PolicyRun:
    """The child's run; `routed` runs the plan with router and merge operators (sponge, or a probe)."""
    over = policy == "over"
    vm_cpus = sorted({*config.vm_cpus, *config.worker_cpus}) if over else list(config.vm_cpus)
    vms = policy in VM_SCALING
    return PolicyRun(
        policy=policy,
        query=config.query,
        events=trace.events,
        seed=config.seed,
        schedule=trace.schedule.text(),
        output=str(config.report / policy / "output"),
        master="standalone",
        vm_cpus=vm_cpus,
        base_cpus=list(config.vm_cpus),  # every run's application has the drill's base VM
        shuffle_partitions=shuffle_partitions(config),
        batch_events=BATCH_CAP * len(vm_cpus),
        onset_s=trace.bursts[0][0] if trace.bursts else None,
        worker_cpus=list(config.worker_cpus),
        offload=routed,
        target=config.target,
        bind=config.bind,
        advertise=config.advertise,
        transport=config.transport,
        tls_dir=config.tls_dir,
        controlled=policy in OFFLOADING or vms,  # vmbase/vminit: the policy's trigger, no plan published
        ablation=policy if policy in ABLATIONS else None,
        max_workers=config.max_workers,
        # The paper keeps SFBase's workers warm as Sponge's (6.1).
        prewarm=config.max_workers if routed and policy in OFFLOADING else 0,
        keep_warm_s=config.keep_warm_s if routed and policy in OFFLOADING else None,
        per_core_rate=per_core,
        rho=config.rho or DEFAULT_RHO.get(config.query, 5.0),
        deadline_s=float(config.window_slide_s),
        window_size_s=config.window_size_s,
        window_slide_s=config.window_slide_s,
        standalone=True,
        warm_vms=1 if policy == "vminit" else 0,
        vms_on_burst=1 if vms else 0,
        # A burst that persists goes from the workers to a VM; with nothing offloaded (offloading does not
        # pay for the query on this machine) there is no load on workers to hand over.
        persistent=policy == "sponge" and routed and bool(config.worker_cpus),
        vm_launch_delay_s=config.vm_launch_delay_s,
        memory=replace(config.memory, executor_mb=config.memory.executor_mb or DEFAULT_EXECUTOR_MB),
        kinesis=_stream_of(config, policy),
    )


def _stream_of(config: DrillConfig, policy: str) -> dict[str, Any] | None:
    """The Kinesis stream a policy's run reads, a new one per drill and policy (a run's records must
    arrive as the trace says, so no run reads another's), as PolicyRun carries it."""
    if config.kinesis is None:
        return None
    name = f"{config.kinesis.stream}-{policy}-{datetime.now(UTC):%Y%m%d%H%M%S}"
    return {**asdict(config.kinesis), "stream": name}


def shuffle_partitions(config: DrillConfig) -> int:
    """One shuffle partition per core any run of the drill can hold, the same for every policy.

    A second partition on one core only adds a task and a state-store commit to every epoch (a routed
    Q5 epoch at 127,000 events/s took 1.7-2.1 s with one partition, 2.4-3.5 s with two, ADR 0013), but
    a VM added at run time needs partitions of its own to take over, and the policies must run the
    same plan: so the count is the VM and worker cores together.
    """
    return len({*config.vm_cpus, *config.worker_cpus})


def deployment(spec: PolicyRun) -> dict[str, Any]:
    """Where a policy ran, for the report: the same for every policy bar what its nature adds."""
    adds = "a VM on the worker cores at the burst" if spec.vms_on_burst else None
    if spec.persistent:
        adds = "VMs on the worker cores when a burst persists"
    return {
        "spark": "standalone",
        "vm_cores": len(spec.vm_cpus),
        "shuffle_partitions": spec.shuffle_partitions,
        "batch_events": spec.batch_events,
        "lambda_workers": spec.max_workers if spec.offload else 0,
        "adds": adds,
        "lacks": BASELINES[spec.ablation].lacks if spec.ablation is not None else None,
    }


def _reference_aside(config: DrillConfig, trace: Trace) -> Future[Any]:
    """The batch reference, computed on a thread pinned to the worker cores while the first run warms
    up (5-10 s here). Every run's warm-up and lead-in come before the seconds its report reads, and the
    workers idle until the burst, so the drill no longer waits for it first."""

    def compute() -> Any:
        os.sched_setaffinity(0, set(config.worker_cpus or config.vm_cpus))  # this thread and its own
        return _reference(config, trace)

    executor = ThreadPoolExecutor(1, thread_name_prefix="reference")
    future = executor.submit(compute)
    executor.shutdown(wait=False)  # the thread ends with its one task
    return future


def _reference(config: DrillConfig, trace: Trace) -> Any:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.params import QueryParams
    from core.nexmark.reference import reference_for

    gen = GeneratorConfig(seed=config.seed, events=trace.events, schedule=trace.schedule)
    return reference_for(config.query, gen, QueryParams(config.window_size_s, config.window_slide_s))


def _summarise(
    config: DrillConfig,
    spec: PolicyRun,
    trace: Trace,
    result: dict[str, Any],
    reference: Any,
    provisioned: int = 0,
) -> dict[str, Any]:
    from core.drill import capacity_use
    from core.drill.steady import pre_burst
    from core.results import diff_results, read_results
    from policy.cost_model import Prices, fleet_cost_usd, stream_cost_usd

    policy = spec.policy
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
    offloads = policy in OFFLOADING  # the others read the policy's decisions but publish no plan
    share = by_second(lambda s: s["decision"]["share"] if s["decision"] and offloads else 0.0)
    worker_s = float(sum(w or 0 for w in workers))
    base_cores = len(config.vm_cpus) + (len(config.worker_cpus) if policy == "over" else 0)
    cores = by_second(lambda s: s["observation"]["vm_cores"])
    prices = Prices()
    provisioned = provisioned if offloads else 0  # the stack's warm environments serve sponge's workers
    shards = result.get("stream_shards", 0)  # a run over Kinesis pays for its stream, whatever the policy
    stream_usd = stream_cost_usd(shards, trace.duration_s, trace.events if shards else 0, prices=prices)
    cost = (
        fleet_cost_usd([w or 0 for w in workers], LAMBDA_MEMORY_MB, provisioned, prices=prices)
        + _vm_cost(result, base_cores, trace.duration_s, prices)
        + stream_usd
    )
    output = config.report / policy / "output"
    match = None if reference is None else diff_results(read_results(output), reference) is None
    peak_p99 = latency.peak(series.p99_ms, trace.bursts, after_s=config.window_slide_s)
    onset, end = trace.bursts[0] if trace.bursts else (trace.duration_s, trace.duration_s)
    pre_p99 = pre_burst(series.p99_ms, onset)
    vm_cpu = by_second(lambda s: s["observation"]["cpu"])
    burst_cpu = capacity_use.mean_between(vm_cpu, onset, end)
    caps = _epoch_caps(spec, result, output / "_offload")
    return {
        "policy": policy,
        "peak_p99_ms": peak_p99,
        "pre_burst_p99_ms": pre_p99,
        "steady_s": result.get("steady_s"),
        "armed_s": result.get("armed_s"),
        "deployment": deployment(spec),
        "before_onset": capacity_use.before_onset(share, workers, onset),
        "in_burst": {
            "admitted_events_per_s": capacity_use.admitted_per_s(epochs, origin, onset, end),
            "vm_cpu": burst_cpu,
            "behind_with_idle_cores": capacity_use.behind_with_idle_cores(peak_p99, pre_p99, burst_cpu),
            # How much of the burst the source's cap held back, and the cap then (ADR 0041, ADR 0008).
            "at_cap": capacity_use.held_by_cap(epochs, caps, origin, onset, end) if caps else None,
            "offload_cost": spec.offload_cost if spec.offload else None,
        },
        "mean_p99_ms_during_burst": latency.mean(series.p99_ms, trace.bursts),
        "p99_ms_by_second": series.p99_ms,
        "p50_ms_by_second": series.p50_ms,
        "reaction_s": (
            _vm_reaction(result, trace)
            if policy in VM_SCALING
            else _reaction(result, trace, output / "_offload")
        ),
        "recovery_s": latency.recovery_s(series.p99_ms, trace.bursts, config.lead_s),
        "lambda_worker_seconds": worker_s,
        "provisioned_environments": provisioned,
        "handover": handover(result, [w or 0 for w in workers], trace.duration_s, prices)
        if offloads
        else None,
        "stream_shards": shards,
        "stream_usd": round(stream_usd, 6),
        "cost_usd": round(cost, 6),
        "results_match_reference": match,
        "vm_cpu_by_second": vm_cpu,
        "workers_by_second": workers,
        "offload_share_by_second": share,
        "vm_cores_by_second": [c if c is not None else base_cores for c in cores],
        "events": trace.events,
        "wall_s": result["summary"]["wall_s"],
        "records_offloaded": result["summary"].get("records_offloaded", 0),
        "operators_offloaded": result["summary"].get("operators_offloaded", {}),
        "handoffs": result["summary"].get("handoffs", {}),
        "cold_starts": result["summary"].get("cold_starts", 0),
        "warm_starts": result["summary"].get("warm_starts", 0),
        "notes": _notes(result),
    }


def _epoch_caps(spec: PolicyRun, result: dict[str, Any], directory: Path) -> list[int] | None:
    """Each epoch's cap as its generated source computed it: the run's cap, scaled by the offloaded share
    of the plan that routed the epoch's offsets (core/offload_plan.py `share_scale`). None for a stream
    (its offsets are per shard) and for a run whose VMs changed (the cap moved with its cores)."""
    from router.routing_log import LOG_FILE, RoutingLog, covering

    if result.get("stream") or result.get("vm_actions"):
        return None
    epochs = result["epochs"]
    # Asked only where a routed run left its log: opening one makes its directory.
    if not spec.offload or not (directory / LOG_FILE).exists():
        return [spec.batch_events] * len(epochs)
    segments = RoutingLog(directory).segments()

    def share(offset: int) -> float:
        routing = covering(segments, offset, offset + 1)
        return routing[0].plan.share if routing else 0.0

    return [batch_cap(spec.batch_events, 1.0, share_scale(share(e["start"]))) for e in epochs]


def _reaction(result: dict[str, Any], trace: Trace, directory: Path) -> float | None:
    """Burst onset to the start of the first epoch that sent records to workers (from the routing log)."""
    from router.routing_log import RoutingLog

    if not trace.bursts or not directory.exists():
        return None
    onset = result["origin"] + trace.bursts[0][0]
    if result.get("stream") or not RoutingLog(directory).exists():
        # A stream's routing logs are per shard, in units of its records, and its epochs count records
        # of all shards together: an epoch that starts once an offloading plan is current plans its
        # ranges (those the other read has not planned yet) with it. So does a run with no router
        # (sfbase), whose plan gives the workers key groups of an operator.
        published = [p["t"] for p in result["published"] if p["share"] > 0]
        first = result["origin"] + published[0] if published else None
        for e in sorted(result["epochs"], key=lambda e: e["started_t"]):
            if first is not None and e["started_t"] >= max(onset, first):
                return round(e["started_t"] - onset, 2)
        return None
    spans = []  # [from, to) offsets some plan offloaded
    segments = RoutingLog(directory).segments()
    for k, seg in enumerate(segments):
        if seg.plan.offloads:
            spans.append((seg.start, segments[k + 1].start if k + 1 < len(segments) else float("inf")))
    for e in sorted(result["epochs"], key=lambda e: e["started_t"]):
        if e["started_t"] >= onset and any(lo < e["covered"] and hi > e["start"] for lo, hi in spans):
            return round(e["started_t"] - onset, 2)
    return None


def provisioned_environments(target: str) -> int:
    """The environments the target's stack keeps warm by provisioned concurrency, billed for every
    second of a run whether used or not (0 for the embedded fleet, and for a stack deployed before its
    template said)."""
    if target == "embedded":
        return 0
    from core.deployment import load_deployment

    return load_deployment(target).provisioned_environments()


def _vm_cost(result: dict[str, Any], base_cores: int, duration_s: float, prices: Any) -> float:
    """VM time in r5.xlarge-core units (4 cores a VM): the base cores for the whole trace, and every VM
    added at run time from its request (a pre-initialised one from the start) to its release or the end."""
    from policy.cost_model import vm_cost_usd

    cost = vm_cost_usd(base_cores / 4, duration_s, prices=prices)
    for vm in result.get("vms", []):
        if vm["base"]:
            continue
        start = 0.0 if vm["warm"] else (vm["requested_s"] if vm["requested_s"] is not None else duration_s)
        end = vm["released_s"] if vm["released_s"] is not None else duration_s
        start, end = max(start, 0.0), min(end, duration_s)
        if end > start:
            cost += vm_cost_usd(vm["cores"] / 4, end - start, prices=prices)
    return cost


def handover(
    result: dict[str, Any], workers: Sequence[float], duration_s: float, prices: Any
) -> dict[str, Any] | None:
    """Sponge's hand-over of a persistent burst to the VMs it bought (None if it bought none): when it
    asked for them, when they were usable, when its idle workers were released and how many, and what
    that cost against staying on workers. Staying on workers keeps the workers connected when they were
    released, billed to the end of the trace as the drill bills every connected worker, and buys no VM;
    the base VM and the stream cost both the same."""
    from policy.cost_model import fleet_cost_usd

    actions = result.get("vm_actions", [])
    if not any(a.get("add") for a in actions):
        return None
    bought = [vm for vm in result.get("vms", []) if not vm["base"] and vm["requested_s"] is not None]
    usable = [vm["usable_s"] for vm in bought if vm["usable_s"] is not None]
    released = next((a for a in actions if "workers_released" in a), None)
    staying = list(workers)
    if released is not None:
        at = min(max(int(released["t"]), 0), len(staying))
        before = max(staying[max(at - 1, 0)] if staying else 0, staying[at] if at < len(staying) else 0)
        staying = staying[:at] + [max(w, before) for w in staying[at:]]
    vm_usd = _vm_cost(result, 0, duration_s, prices)
    lambda_usd = fleet_cost_usd(workers, LAMBDA_MEMORY_MB, prices=prices)
    staying_usd = fleet_cost_usd(staying, LAMBDA_MEMORY_MB, prices=prices)
    return {
        "requested_s": min(vm["requested_s"] for vm in bought) if bought else None,
        "usable_s": min(usable) if usable else None,
        "vms_bought": len(bought),
        "workers_released_s": released["t"] if released is not None else None,
        "workers_released": released["workers_released"] if released is not None else 0,
        "vm_usd": round(vm_usd, 6),
        "lambda_usd": round(lambda_usd, 6),
        "staying_on_workers_usd": round(staying_usd, 6),
        "saved_usd": round(staying_usd - vm_usd - lambda_usd, 6),
    }


def _vm_reaction(result: dict[str, Any], trace: Trace) -> float | None:
    """Burst onset to the first added VM's executor registering with the driver (its cores usable)."""
    if not trace.bursts:
        return None
    onset = trace.bursts[0][0]
    usable = [vm["usable_s"] for vm in result.get("vms", []) if not vm["base"] and vm["usable_s"] is not None]
    usable = [t for t in usable if t >= onset]
    return round(min(usable) - onset, 2) if usable else None


def _notes(result: dict[str, Any]) -> str:
    notes = _vm_notes(result) if "vms" in result else _offload_notes(result["summary"])
    moved = result.get("migrations") or []
    if moved:  # a baseline without transient operators (core/ablations.py)
        migrations = f"{len(moved)} task migrations (query restarts), the first at {moved[0]:.1f} s"
        notes = f"{notes}; {migrations}" if notes else migrations
    return notes


def _offload_notes(s: dict[str, Any]) -> str:
    if not s.get("records_offloaded"):
        return ""
    return (
        f"{s['records_offloaded']:,} records offloaded; {s.get('workers_started', 0)} workers started, "
        f"{s.get('workers_prewarmed', 0)} prewarmed, {s.get('cold_starts', 0)} cold starts, "
        f"{s.get('warm_starts', 0)} warm starts"
    )


def _vm_notes(result: dict[str, Any]) -> str:
    """One line on the VM side: when the VM was asked for and usable, and where the tasks ran."""
    parts = []
    for action in result.get("vm_actions", []):
        if "workers_released" in action:
            parts.append(f"{action['workers_released']} idle workers released at {action['t']:.1f} s")
        else:
            verb = "requested" if action.get("add") else "released"
            parts.append(f"VM {verb} at {action['t']:.1f} s ({action['reason']})")
    for vm in result["vms"]:
        if vm["base"]:
            continue
        what = "pre-initialised VM" if vm["warm"] else "new VM"
        if vm["usable_s"] is None:
            parts.append(f"{what} {vm['vm']} never became usable ({vm['state']})")
        else:
            boot = "" if vm["warm"] else f"worker up at {vm['worker_registered_s']:.1f} s, "
            parts.append(
                f"{what} {vm['vm']}: {boot}executor usable at {vm['usable_s']:.1f} s "
                f"({vm['request_to_usable_s']:.1f} s after the request)"
            )
    tasks = [f"{e['completed_tasks']}" for e in result.get("executors", [])]
    if tasks:
        parts.append(f"tasks per executor: {' / '.join(tasks)}")
    parts.extend(result.get("loop_errors", []))
    return "; ".join(parts)


def policies_from(text: str) -> tuple[str, ...]:
    return tuple(p.strip().lower() for p in text.split(",") if p.strip())

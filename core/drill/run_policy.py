"""The drill's runs, in one child process holding one Spark application: `python -m core.drill.run_policy`
reads one `[SPEC.json, OUT.json]` line per run from its stdin and writes OUT.json when the run is done.

Why a child process: the drill pins the VM side (the driver, its JVM and the base VM) to the VM cores,
and a JVM inherits its CPU affinity from the process that starts it. The agent and its Lambda workers
are pinned to the other cores, so offloading adds capacity instead of stealing it from the VMs.

Why one application for every run (the probes' and each policy's): a run in a process of its own paid
20-24 s before its VMs were up, 25-40 s before its first epoch committed and a warm-up on top of its
trace; five of them made `make drill` 7-14 minutes (docs/adr/0059). Here the JVMs, their compiled code
and the executors' Python workers carry over, and a run pays its warm-up only.

With `standalone` the VMs are workers of a Spark standalone cluster on 127.0.0.1 (core/spark/vm_pool.py):
the base VM's worker is pinned to the VM cores, the driver too, and VMs added at run time (VMBase,
VMInit, persistent bursts) to the worker cores. For Over's run the base VM is resized to every core of
the drill, the driver pinned to them too. After each run the pool returns to its base VM. The
monitor's CPU covers the driver and every executor JVM with its Python workers, and its vm_cores
counts the cores of the registered executors.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from core.ablations import BASELINES
from core.atomic_write import write_text
from core.drill.calibrate import fixed_from_small_epochs
from core.drill.steady import ArmedPolicy, SteadyWatch
from core.errors import ConfigError, SpongeError
from core.latency import Epoch
from core.offload_plan import DEFAULT_OFFLOAD_COST
from core.run_output import Existing
from core.spark.admission import write_vm_scale
from core.spark.runner import RunHooks
from core.spark.session import MachineMemory, MemoryConfig
from policy.cost_model import Prices

WARMUP_EVENTS = 30_000
WARMUP_EPOCHS = 8  # standalone and offloading runs: see _run
WARMED_EPOCHS = 3  # a run whose plan the application's executors have run before
WARMUP_SHARE = 0.5  # an offloading run warms its routed plan with both routes carrying records
EXECUTOR_START_S = 8.0  # a new worker's registration plus its executor's start here (ADR 0007)
# Two task slots per CPU, as local[2N] gives N cores: a routed plan's offload tasks mostly wait on
# chunks in flight, and with one slot per CPU they held the VM's only slot while its local tasks queued
# behind them (measured: a routed Q5 epoch of 1.4 M events took 87 s, the VM's CPU idle, against ~2 s
# with two slots).
SLOTS_PER_CPU = 2
# A stateful stage has as many tasks as shuffle partitions (one per core the run can ever hold). Spark's
# delay scheduling would keep a task waiting up to 3 s for the executor that last held its partition's
# state (and the wait restarts with every task launched there), so a new VM got no stateful task while
# the base one kept up with short tasks (measured: 0 tasks in 10 s). With no wait a task takes any free
# slot, the new VM's too, and its state store reloads there from the checkpoint: VMBase's "migrate
# tasks and state to the new VM".
STANDALONE_CONF = (("spark.locality.wait", "0"),)
STREAM_SHARDS = 2  # a run's stream: its records are read by one task per shard
PRODUCER_WAIT_S = 30.0  # a run over Kinesis ends at its stream's end markers: its producer is done by then
ERROR_FILE = "error.json"  # a failed run's error for the drill: {"kind", "message", "hint"}
RUN_LOG = "run.log"  # beside a run's spec: what the child printed during the run


@dataclass(frozen=True)
class PolicyRun:
    """Everything the child needs (JSON on disk between the two processes)."""

    policy: str
    query: str
    events: int
    seed: int
    schedule: str
    output: str
    master: str
    vm_cpus: list[int]  # the run's VM cores: the base VM's, or (Over) every core its VM is resized to
    shuffle_partitions: int = 2  # one per core the run's VMs can ever hold (drill._spec)
    worker_cpus: list[int] = field(default_factory=list)
    offload: bool = False  # work goes to the agent's workers (sponge, the baselines of core/ablations.py)
    ablation: str | None = None  # run as this baseline of the paper (core/ablations.py)
    target: str = "embedded"  # where the Lambda workers run (localstack/aws: the deployed stack)
    bind: str | None = None  # the agent's address, the one its workers dial, and its transport
    advertise: str | None = None
    transport: str | None = None
    tls_dir: str | None = None  # the user's own certificates (core/config_file.py), if any
    controlled: bool = False  # the policy loop decides the share
    max_workers: int = 4
    prewarm: int = 0
    keep_warm_s: float | None = None  # the agent's keep-warm interval (router/agent/warm_pool.py); None: off
    per_core_rate: float = 0.0
    rho: float = 1.0
    deadline_s: float = 2.0
    window_size_s: int = 10
    window_slide_s: int = 2
    standalone: bool = False  # VMs are standalone workers that can be added (vmbase, vminit, persistent)
    warm_vms: int = 0  # VMs initialised in advance, holding no executor until asked for (vminit)
    vms_on_burst: int = 0  # VMs asked for at the first burst the policy detects (vmbase, vminit)
    vm_launch_delay_s: float = 25.0  # a new VM's boot, before its worker starts
    persistent: bool = False  # the persistent-burst rule may buy VMs (policy/persistent_burst.py)
    persistent_handover_s: float = 5.0  # Lambdas kept after the bought VMs are usable (the rule's H)
    batch_events: int = 200_000  # the source's cap per epoch at the run's starting VM cores
    onset_s: float | None = None  # the first burst's start: the policy decides from then if never steady
    share: float = 0.0  # offloaded share while the policy has not decided (the routed probe's fixed share)
    offload_cost: float = DEFAULT_OFFLOAD_COST  # an offloaded event's VM work in kept events (calibrated)
    epoch_fixed_s: float | None = None  # the calibrated fixed epoch cost: the monitor's utilisation
    memory: MemoryConfig = field(default_factory=MemoryConfig)  # heaps and state store (the drill's flags)
    jvm_log: str | None = None  # where the JVM's output goes (default: beside the output directory)
    base_cpus: list[int] | None = None  # the application's base VM's cores (None: vm_cpus)
    # The Kinesis stream the trace is read from (core.kinesis.KinesisEndpoint's fields), which a producer
    # process fills at the schedule's pace from the run's start; None: the generator paces the events.
    kinesis: dict[str, Any] | None = None

    @property
    def stream(self) -> Any:
        from core.kinesis import KinesisEndpoint

        return KinesisEndpoint(**self.kinesis) if self.kinesis is not None else None

    def __post_init__(self) -> None:
        if isinstance(self.memory, dict):  # read back from spec.json (dataclasses.asdict's form)
            values = dict(self.memory)
            values["machine"] = MachineMemory(**values["machine"]) if values.get("machine") else None
            values["flags"] = tuple(values.get("flags", ()))
            object.__setattr__(self, "memory", MemoryConfig(**values))
        if (self.persistent or self.warm_vms or self.vms_on_burst) and not self.standalone:
            raise ConfigError(
                "adding VMs at run time needs the standalone VMs",
                hint="set standalone (local[N] is one executor that cannot grow)",
            )
        if self.persistent and not (self.controlled and self.offload):
            raise ConfigError(
                "the persistent-burst rule hands Sponge's offloaded load to VMs",
                hint="run it with the sponge policy (controlled, offload)",
            )


class DrillHooks(RunHooks):
    """Keeps the epochs as they commit and runs the policy loop (monitoring only for baselines)."""

    def __init__(self, run: PolicyRun, schedule: Any, pool: Any = None) -> None:
        self.run = run
        self.schedule = schedule
        self.pool = pool  # core.spark.vm_pool.VmPool for standalone runs
        self.vm_action: Any = None
        self.executors: list[dict[str, Any]] = []
        self.epochs: list[Epoch] = []
        self.phases: list[dict[str, int]] = []  # Spark's durationMs per epoch, beside self.epochs
        self.covered = 0
        self.loop: Any = None
        self.session: Any = None
        self.origin = 0.0
        self.published: list[dict[str, Any]] = []
        self.steady = SteadyWatch(schedule)
        self.epoch_fixed_s = run.epoch_fixed_s  # calibrated; else measured by the warm-up (_run)
        self.armed: ArmedPolicy | None = None
        self._vm_scale = 1.0
        self.producer: subprocess.Popen[bytes] | None = None  # a run over Kinesis: what fills the stream
        self.producer_exit: int | None = None
        self._executors_before: list[dict[str, Any]] = []  # the application's earlier runs' tasks
        self.migrations: list[float] = []  # a baseline's task migrations: when each plan change came
        self._migrate = threading.Event()

    def on_progress(self, p: dict) -> None:
        from core.spark.live_policy import generated_epoch, stream_epoch

        epoch = generated_epoch(p) if self.run.kinesis is None else stream_epoch(p)
        if epoch is None:
            return
        self.epochs.append(epoch)
        self.phases.append(dict(p.get("durationMs") or {}))
        self.covered = max(self.covered, epoch.covered)
        self.steady.add(epoch)

    def started(self, spark: Any, session: Any, origin: float) -> None:
        from core.spark.live_policy import spark_monitor
        from policy.decision_log import DecisionLog
        from policy.loop import PolicyLoop
        from policy.offload_policy import PolicyConfig, SpongePolicy

        self.session, self.origin = session, origin
        self._executors_before = self.pool.executors() if self.pool is not None else []
        self.steady.origin = origin
        released_cap = self.run.events + 1

        def scheduled() -> int:
            return min(int(self.schedule.events_by(time.time() - origin)), released_cap)

        released: Callable[[], int] = scheduled
        if self.run.kinesis is not None:
            from core.kinesis import StreamTail

            self.producer = start_producer(self.run)
            released = StreamTail(self.run.stream).count  # what the producer has put, as Kinesis shows it
        monitor = spark_monitor(
            spark,
            released=released,
            committed=lambda: self.covered,
            last_epoch_s=lambda: (
                (self.epochs[-1].commit_t - self.epochs[-1].started_t) if self.epochs else None
            ),
            origin=origin,
            epoch_fixed_s=self.epoch_fixed_s,
            pool=self.pool,
        )
        policy = log = None
        if self.run.controlled:
            config = PolicyConfig(
                per_core_rate=self.run.per_core_rate,
                rho=self.run.rho,
                deadline_s=self.run.deadline_s,
                max_workers=self.run.max_workers,
                offload_cost=self.run.offload_cost,
            )
            rule = self._vm_rule() if self.run.persistent else None
            self.armed = ArmedPolicy(SpongePolicy(config), self._armed)
            policy, log = (
                self.armed,
                DecisionLog(Path(self.run.output + "-decisions.jsonl"), config, vm_rule=rule),
            )
            self.vm_action = self._vm_action(rule)
        self.loop = PolicyLoop(
            monitor=monitor,
            policy=policy,
            apply=self._apply,
            log=log,
            gauges=self._gauges,
            vm_action=self.vm_action,
            on_sample=self._admit,
        )
        self.loop.start()

    def _armed(self, t: float) -> bool:
        """The policy decides once the run is steady, or from the burst's onset if it never settles."""
        onset = self.run.onset_s
        return self.steady.steady_s is not None or (onset is not None and t >= onset)

    def _admit(self, obs: Any, decision: Any, gauges: dict[str, float]) -> None:
        """Publish the VM cores' ratio to the start's for the source's cap (core/spark/admission.py)."""
        if self.pool is None or not obs.vm_cores:
            return
        scale = obs.vm_cores / len(self.run.vm_cpus)  # the base VM is pinned to the VM cores
        if scale != self._vm_scale:
            write_vm_scale(capacity_file(self.run), scale)
            self._vm_scale = scale

    def _vm_rule(self) -> Any:
        """The persistent-burst rule, sized for this machine: one added VM on the worker cores at most."""
        from core.spark.vm_pool import cpu_cores
        from policy.cost_model import PersistentBurstConfig
        from policy.persistent_burst import PersistentBurstRule

        if self.pool is None:
            raise ConfigError("persistent bursts need the standalone VMs", hint="set PolicyRun.standalone")
        # The rule's launch delay runs from the request to a usable executor: the boot plus the worker's
        # registration and the executor's start (ADR 0007: ~8 s here).
        cores = cpu_cores(self.pool.new_vm)
        return PersistentBurstRule(
            PersistentBurstConfig(
                launch_delay_s=self.run.vm_launch_delay_s + EXECUTOR_START_S,
                handover_s=self.run.persistent_handover_s,
            ),
            vm_prices(cores),
            per_core_rate=self.run.per_core_rate,
            rho=self.run.rho,
            cores_per_vm=cores,
            base_vms=self.pool.base_vms,
            max_new_vms=1,  # the worker cores hold one more VM on this machine
        )

    def _vm_action(self, rule: Any) -> Any:
        from core.drill.vm_actions import PersistentVms, ScaleOnBurst

        if self.pool is None:
            return None
        if rule is not None:
            release = self.session.release_workers if self.session is not None else None
            return PersistentVms(rule, self.pool, self.pool.base_vms, self.run.vm_launch_delay_s, release)
        if self.run.vms_on_burst:
            return ScaleOnBurst(self.pool, self.run.vms_on_burst, self.run.vm_launch_delay_s)
        return None

    def _gauges(self) -> dict[str, float]:
        from core.spark.live_policy import agent_gauges

        gauges: dict[str, float] = {}
        if self.pool is not None:
            gauges.update(vms_usable=self.pool.usable(), vms_pending=self.pool.pending())
        return {**gauges, **agent_gauges(self.session)}

    def _apply(self, decision: Any) -> None:
        if self.session is None:  # VMBase/VMInit read the policy's trigger but publish no plan
            return
        before = self.published[-1]["share"] if self.published else self.run.share
        plan = self.session.publish(decision.share, decision.workers)
        t = time.time() - self.origin
        self.published.append({"t": t, "share": plan.share, "workers": plan.workers})
        migrates = self.run.ablation is not None and not BASELINES[self.run.ablation].transients
        if migrates and plan.share != before:
            self.migrations.append(t)
            self._migrate.set()

    def restart_due(self) -> bool:
        """Without transient operators a new plan moves tasks: the query restarts once per change, or
        once for changes that came while it restarted."""
        due = self._migrate.is_set()
        self._migrate.clear()
        return due

    def stopped(self) -> None:
        if self.loop is not None:
            self.loop.stop()
        if self.producer is not None:
            self.producer_exit = stop_producer(self.producer)
        if self.pool is not None:  # while the application still runs: where its tasks ran
            self.executors = _since(self.pool.executors(), self._executors_before)

    def vm_result(self) -> dict[str, Any]:
        """The VM side's record for the drill: each VM's stamps, the executors' tasks, the actions taken."""
        if self.pool is None:
            return {}
        return {
            "vm_scale": self._vm_scale,
            "vms": self.pool.timeline(self.origin),
            "executors": self.executors,
            "vm_actions": getattr(self.vm_action, "events", []),
            "loop_errors": self.loop.errors if self.loop is not None else [],
        }

    def per_second(self) -> list[dict[str, Any]]:
        """The loop's samples: observation, decision and the agent's worker gauge."""
        return [
            {"observation": asdict(o), "decision": asdict(d) if d is not None else None, "gauges": g}
            for o, d, g in self.loop.samples
        ]


def _since(executors: list[dict[str, Any]], before: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The run's share of the application's executors: those alive at its start or started since, with
    the tasks they ran since."""
    earlier = {e["id"]: e for e in before}
    out = []
    for e in executors:
        was = earlier.get(e["id"])
        if was is not None and not was["active"]:
            continue
        if was is not None:
            e = {**e, **{k: e[k] - was[k] for k in ("completed_tasks", "failed_tasks")}}
        out.append(e)
    return out


def start_producer(spec: PolicyRun) -> subprocess.Popen[bytes]:
    """`sponge produce` in a process of its own (the world outside the VM), putting the trace's events
    into the run's stream at the schedule's pace from now, on the worker cores (not the VM's)."""
    stream = spec.stream
    command = [sys.executable, "-c", "from core.cli.main import main; main()", "produce"]
    command += ["--stream", stream.stream, "--region", stream.region, "--events", str(spec.events)]
    command += ["--seed", str(spec.seed), "--schedule", spec.schedule]
    command += ["--endpoint-url", stream.endpoint_url] if stream.endpoint_url else []
    cpus = ",".join(str(c) for c in spec.worker_cpus or spec.vm_cpus)
    log = Path(spec.output).parent / "producer.log"
    with log.open("wb") as f:
        return subprocess.Popen(["taskset", "-c", cpus, *command], stdout=f, stderr=subprocess.STDOUT)


def stop_producer(producer: subprocess.Popen[bytes]) -> int:
    """The producer's exit status once it has put everything (the run read to its end markers, so it
    has), or after it is stopped: it must not outlive its run."""
    try:
        return producer.wait(timeout=PRODUCER_WAIT_S)
    except subprocess.TimeoutExpired:
        producer.terminate()
        return producer.wait(timeout=PRODUCER_WAIT_S)


def capacity_file(spec: PolicyRun) -> Path:
    """Where the driver publishes the run's VM capacity scale for its source (beside its output)."""
    out = Path(spec.output)
    return out.parent / f"{out.name}-capacity"


class Application:
    """The drill's one Spark application: its VMs and driver, started for the first run and kept for the
    runs after it. Every run must share the first one's master and base VM cores.

    A run leaves its VMs as they are when it ends, so its result is out while they go: the next run
    first returns the pool to its base VM (`VmPool.reset`), and the last one never waits for that.
    """

    def __init__(self) -> None:
        self.pool: Any = None  # core.spark.vm_pool.VmPool of a standalone application
        self.base: frozenset[int] | None = None
        self.master: str | None = None
        self._warmed: set[tuple[Any, ...]] = set()  # plans the application has run

    def run(self, spec: PolicyRun) -> dict[str, Any]:
        if self.base is None:
            self.base, self.master = frozenset(spec.base_cpus or spec.vm_cpus), spec.master
            self.pool = _start_vms(spec, self.base) if spec.standalone else None
        elif self.pool is not None:
            self.pool.reset()
        cpus = self._vm_cpus(spec)
        _pin(cpus)
        if cpus != self.base:
            self.pool.resize_base(cpus)
        if self.pool is not None and spec.warm_vms:
            self.pool.prewarm(spec.warm_vms)
        plan = (spec.query, spec.offload, spec.ablation, spec.window_size_s, spec.window_slide_s)
        warmed = plan in self._warmed
        self._warmed.add(plan)
        return _run(spec, self.pool, warmed)

    def _vm_cpus(self, spec: PolicyRun) -> frozenset[int]:
        """The run's VM cores: the base VM's, or more of them for a run whose VM is bigger (Over's)."""
        base = frozenset(spec.base_cpus or spec.vm_cpus)
        if base != self.base or spec.master != self.master or spec.standalone != (self.pool is not None):
            first = f"{self.master}, base VM cores {sorted(self.base or ())}"
            raise ConfigError(
                f"the {spec.policy} run needs another application ({spec.master}, base VM cores "
                f"{sorted(base)}) than the drill's first run started ({first})",
                hint="every run of one drill shares its master and base VM cores",
            )
        if frozenset(spec.vm_cpus) != base and self.pool is None:
            raise ConfigError(
                f"the {spec.policy} run has more VM cores than the base VM, and only standalone VMs can grow",
                hint="run it on the standalone VMs (PolicyRun.standalone)",
            )
        return frozenset(spec.vm_cpus)

    def close(self) -> None:
        if self.pool is not None:
            from core.spark.session import stop_active_session

            stop_active_session()
            self.pool.stop()


def _pin(cpus: frozenset[int]) -> None:
    """Pin this process and its driver JVM to `cpus`."""
    from core.spark.affinity import pin_process
    from core.spark.session import current_jvm

    jvm = current_jvm()
    for pid in [os.getpid()] + ([jvm.proc.pid] if jvm is not None and jvm.proc is not None else []):
        pin_process(pid, cpus)


def _start_vms(spec: PolicyRun, base_cpus: frozenset[int]) -> Any:
    """The standalone "VMs": the base VM (the VM cores), the driver on it, the pool attached to the app."""
    from core.spark.cluster_config import WorkerSpec
    from core.spark.session import spark_session, stop_active_session
    from core.spark.vm_pool import VmPool

    out = Path(spec.output)
    memory_mb = spec.memory.executor_mb or 1024  # each VM offers exactly its executor's heap
    cpus = tuple(sorted(base_cpus))
    base = WorkerSpec(cores=SLOTS_PER_CPU * len(cpus), memory_mb=memory_mb, cpus=cpus)
    new_vm = WorkerSpec(
        cores=SLOTS_PER_CPU * len(spec.worker_cpus), memory_mb=memory_mb, cpus=tuple(spec.worker_cpus)
    )
    started = time.monotonic()
    pool = VmPool.start(out.parent.parent / "cluster", base, new_vm)
    try:
        # The driver's JVM sizes its garbage collector and compiler threads for the cores it starts on:
        # those of the biggest run (Over's), as Over's own application had them. Its runs pin it after.
        _pin(frozenset(spec.vm_cpus) | base_cpus | frozenset(spec.worker_cpus))
        spark = spark_session(_spark_config(spec, pool.master_url))
        _pin(base_cpus)
        pool.attach(spark)
    except BaseException:
        stop_active_session()
        pool.stop()
        raise
    print(f"standalone VMs ready in {time.monotonic() - started:.1f} s: {pool.cluster.timings}", flush=True)
    return pool


def vm_prices(cores: int, list_prices: Prices | None = None) -> Prices:
    """A drill's "VM" of `cores` cores, priced as that share of the list VM (as the drill bills VM time)."""
    list_prices = list_prices or Prices()
    share = cores / list_prices.vm_cores
    return replace(
        list_prices,
        vm_type=f"{cores} of {list_prices.vm_cores} cores of {list_prices.vm_type}",
        vm_usd_per_hour=list_prices.vm_usd_per_hour * share,
        vm_cores=cores,
    )


def _spark_config(spec: PolicyRun, standalone_url: str | None) -> Any:
    from core.spark.session import SparkConfig

    return SparkConfig(
        master=standalone_url or spec.master,
        shuffle_partitions=spec.shuffle_partitions,
        conf=STANDALONE_CONF if standalone_url else (),
        memory=spec.memory,
        jvm_log=Path(spec.jvm_log) if spec.jvm_log else Path(spec.output).parent / "jvm.log",
    )


def _run(spec: PolicyRun, pool: Any, warmed: bool = False) -> dict[str, Any]:
    """One run on the application: its warm-up, then its trace. `warmed`: the application has run the
    same plan on the same executors before, so a short warm-up does."""
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.params import QueryParams
    from core.nexmark.schedule import RateSchedule
    from core.spark.offload_session import OffloadConfig
    from core.spark.runner import RunConfig, run_query

    schedule = RateSchedule.parse(spec.schedule)
    out = Path(spec.output)
    offload = None
    if spec.offload:
        offload = OffloadConfig(
            share=spec.share,
            target=spec.target,
            bind=spec.bind,
            advertise=spec.advertise,
            transport=spec.transport,
            tls_dir=spec.tls_dir,
            workers=spec.max_workers,
            worker_cpus=frozenset(spec.worker_cpus) or None,
            prewarm=spec.prewarm,
            keep_warm_s=spec.keep_warm_s,
            idle_timeout_s=600.0,  # the warm pool keeps its sessions for the whole drill
        )
    hooks = DrillHooks(spec, schedule, pool)
    stream = spec.stream
    config = RunConfig(
        query=spec.query,
        generator=GeneratorConfig(seed=spec.seed, events=spec.events, schedule=schedule),
        output=out,
        existing=Existing.REPLACE,  # the drill's own run from an earlier drill
        params=QueryParams(window_size_s=spec.window_size_s, window_slide_s=spec.window_slide_s),
        pace=stream is None,  # a stream is paced by its producer
        max_events_per_batch=spec.batch_events,
        min_partitions=len(spec.vm_cpus),  # every VM core reads from the warm-up on (source.py split_step)
        # The cap scales with VM capacity on the generated source; a stream's cap per shard is fixed.
        capacity_file=capacity_file(spec) if pool is not None and stream is None else None,
        spark=_spark_config(spec, pool.master_url if pool is not None else None),
        offload=offload,
        kinesis=stream,
        ablation=spec.ablation,
    )
    capacity_file(spec).unlink(missing_ok=True)  # an earlier drill's scale must not carry over
    # Warm the JVM, its code generation and the Python workers first: the VMs of a job in its stable
    # period are warm, and the drill's trace starts in that stable period. On a standalone cluster the
    # driver and the executor are separate JVMs whose per-epoch paths warm only over many epochs (one
    # big warm-up epoch left the trace's first epochs at 3-5 s instead of 1.5-2 s), so the warm-up
    # there runs in WARMUP_EPOCHS small epochs. An offloading run warms its routed plan in small
    # epochs too: warmed by the plain plan only, its first routed epoch took 13.7 s and the next ten
    # 1.9-2.9 s before settling at 1.3 s; warmed on the routed plan, 2.7 s and then 1.3-1.6 s (Q5).
    # On a standalone cluster each warm-up epoch runs in one task per executor slot, so every Python
    # worker the trace's biggest epochs run at once is started before the trace (source.py split_step).
    # In a warm application a few epochs start the new query's state stores and (routed) its agent.
    epochs = WARMUP_EPOCHS if pool is not None or offload is not None else 1
    epochs = min(epochs, WARMED_EPOCHS) if warmed else epochs
    warmup: list[Epoch] = []
    run_query(
        replace(
            config,
            generator=GeneratorConfig(seed=spec.seed, events=WARMUP_EVENTS),
            pace=False,
            kinesis=None,  # the warm-up's events are generated, whatever the trace's source
            offload=replace(offload, share=WARMUP_SHARE, prewarm=0) if offload is not None else None,
            output=out.parent / f"{out.name}-warmup",
            max_events_per_batch=WARMUP_EVENTS // epochs if epochs > 1 else config.max_events_per_batch,
            tasks_per_epoch=SLOTS_PER_CPU * len(spec.vm_cpus) if pool is not None else 0,
        ),
        progress=lambda p: _keep_epoch(p, warmup),
    )
    if hooks.epoch_fixed_s is None:
        hooks.epoch_fixed_s = fixed_from_small_epochs(warmup)
    if stream is not None:  # empty until the run starts: the producer puts the trace from its start
        from core.kinesis import ensure_stream

        ensure_stream(stream.client(), stream, STREAM_SHARDS)
    summary = run_query(config, progress=hooks.on_progress, hooks=hooks)
    if hooks.producer_exit:
        log = Path(spec.output).parent / "producer.log"
        raise SpongeError(
            f"the producer of stream {stream.stream if stream else '?'} failed (exit {hooks.producer_exit})",
            hint=f"see {log}; is Kinesis at {stream.endpoint_url if stream else '?'} up (make localstack)?",
        )
    return {
        "summary": summary,
        "origin": hooks.origin,
        "epochs": [asdict(e) for e in hooks.epochs],
        # A probe's small epochs, the fixed cost's end of its line (calibrate.fit_probe).
        "warmup_epochs": [asdict(e) for e in warmup],
        "phases": hooks.phases,  # where each epoch's time went (Spark's durationMs), in the same order
        "samples": hooks.per_second(),
        "published": hooks.published,
        "migrations": hooks.migrations,
        "steady_s": hooks.steady.steady_s,
        "steady_criterion": hooks.steady.criterion.describe(),
        "armed_s": hooks.armed.armed_s if hooks.armed is not None else None,
        "stream": stream.stream if stream is not None else None,
        "stream_shards": STREAM_SHARDS if stream is not None else 0,
        **hooks.vm_result(),
    }


def _keep_epoch(progress: dict, into: list[Epoch]) -> None:
    from core.spark.live_policy import generated_epoch

    epoch = generated_epoch(progress)
    if epoch is not None:
        into.append(epoch)


def main() -> int:
    """Serve runs until stdin closes; the first that fails ends the process (its JVM may be gone)."""
    # A terminated run unwinds like an interrupted one, so the agent, its workers and the VMs it
    # started are stopped by the runner's own clean-up instead of outliving it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    app = Application()
    try:
        for line in sys.stdin:
            spec_path, result_path = (Path(p) for p in json.loads(line))
            spec = PolicyRun(**json.loads(spec_path.read_text()))
            with _output_to(spec_path.with_name(RUN_LOG)):
                try:
                    result = app.run(spec)
                except SpongeError as e:  # the drill re-raises it as it is (a dead JVM says why)
                    report = {"kind": type(e).__name__, "message": e.message, "hint": e.hint}
                    write_text(result_path.with_name(ERROR_FILE), json.dumps(report), durable=False)
                    print(f"error: {e.one_line()}", file=sys.stderr, flush=True)
                    return 2
                except Exception:
                    traceback.print_exc()  # into the run's log, where the drill reads why it failed
                    return 1
            write_text(result_path, json.dumps(result), durable=False)  # whole when the drill sees it
    finally:
        app.close()
    return 0


@contextlib.contextmanager
def _output_to(log: Path) -> Iterator[None]:
    """This process's stdout and stderr (file descriptors, so what the runner's libraries print too) go
    to `log` for the run."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = (os.dup(1), os.dup(2))
    with open(log, "ab") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)


if __name__ == "__main__":
    sys.exit(main())

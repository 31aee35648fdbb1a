"""The "VMs" of a drill on a standalone cluster: ask for more, see when they are usable, give them back.

Why: a VM added to a running Spark application helps only once its executor has registered with the
driver; until then it is pending (booting, then its executor JVM starting). The policy loop and the
persistent-burst rule need counts (usable, pending, cores) and two actions (request, release); the
CPU monitor needs the processes doing the VM side's work: the driver JVM, every executor JVM and its
Python workers. `VmPool` wraps a `StandaloneCluster` (one worker per VM) and the application's
SparkContext to give exactly that.

How the application's executors are steered: the pool sets the application's executor target itself
with `SparkContext.requestTotalExecutors`, a developer API the standalone master honours without
dynamic allocation (it launches no executor beyond the target; checked in
tests/core/spark/test_vm_pool.py). The target is the number of VMs the pool wants used, so:
* a new VM (VMBase) raises the target at the request and its worker starts after the launch delay
  (the VM's boot); the master launches an executor on it as soon as the worker registers;
* a pre-initialised VM (VMInit) is a worker started in advance while the target stays below it: it is
  booted and registered but holds no executor and no task. Asking for it raises the target, and the
  master launches its executor at once (its executor JVM starts in a few seconds);
* releasing a VM lowers the target, kills its executor through the driver (its tasks are retried
  elsewhere and its state stores reload there from the checkpoint) and stops its worker.

Threads: the policy loop calls every method from its own thread; a watcher thread polls the driver
every 0.2 s while a VM is pending so that the time it became usable is stamped to the poll, not to the
loop's second. Times are unix seconds (time.time()), like the drill's origin.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from core.errors import ConfigError, SpongeError
from core.spark.affinity import pin_tree, thread_cpus
from core.spark.cluster import PendingWorker, StandaloneCluster, alive, descendants
from core.spark.cluster_config import ClusterConfig, WorkerSpec

EXECUTOR_CLASS = "CoarseGrainedExecutorBackend"
WATCH_INTERVAL_S = 0.2
REFRESH_MAX_AGE_S = 0.2  # the loop asks several times per second; one driver round trip serves them


class VmPoolError(SpongeError):
    """The application got no executor, or a VM could not be brought up."""


@dataclass
class Vm:
    """One "VM": a standalone worker and, once registered with the driver, the application's executor on it.

    `requested_t` is when it was asked for (for a pre-initialised VM: when the application was allowed
    to use it), `usable_t` when its first executor registered with the driver, `released_t` when given
    back. `executor_id`/`executor_pid` are those of its live executor (None while it has none).
    """

    index: int
    cores: int  # CPU cores (see cpu_cores)
    worker: PendingWorker
    base: bool = False
    warm: bool = False  # started in advance (VMInit): booted, no executor until requested
    requested_t: float | None = None
    usable_t: float | None = None
    released_t: float | None = None
    executor_id: str | None = None
    executor_pid: int | None = None
    executor_ids: list[str] = field(default_factory=list)  # every executor it has had, in order

    @property
    def state(self) -> str:
        if self.released_t is not None:
            return "released"
        if self.executor_id is not None:
            return "usable"
        if self.requested_t is None:
            return "warm"  # pre-initialised and not asked for yet
        return "pending"

    def timeline(self, origin: float) -> dict[str, Any]:
        """This VM's stamps in seconds since `origin` (the drill's trace start), for the run's result."""
        mono_to_unix = time.time() - time.monotonic()

        def rel(t: float | None, monotonic: bool = False) -> float | None:
            return None if t is None else round(t + (mono_to_unix if monotonic else 0.0) - origin, 3)

        w = self.worker
        return {
            "vm": self.index,
            "cores": self.cores,
            "base": self.base,
            "warm": self.warm,
            "state": self.state,
            "executor_ids": list(self.executor_ids),
            "requested_s": rel(self.requested_t),
            "worker_launched_s": rel(w.launched_at, monotonic=True),
            "worker_registered_s": rel(w.registered_at, monotonic=True),
            "usable_s": rel(self.usable_t),
            "released_s": rel(self.released_t),
            "request_to_usable_s": (
                None
                if self.requested_t is None or self.usable_t is None
                else round(self.usable_t - self.requested_t, 3)
            ),
        }


def cpu_cores(spec: WorkerSpec) -> int:
    """The CPU cores a VM has: the CPUs its worker is pinned to, else the cores it offers.

    A worker may offer more task slots than it has CPUs (like local[2N] on N cores); the monitor's
    vm_cores counts CPUs, the capacity the policy reasons about.
    """
    return len(spec.cpus) if spec.cpus else spec.cores


class VmPool:
    """The VMs of one Spark application on a standalone cluster (one worker per VM).

    Use: `VmPool.start(...)` (master and the base VM's worker), build the SparkSession on
    `master_url`, `attach(spark)`, optionally `prewarm(n)`; then `request`, `release`, `usable`,
    `pending`, `cores`, `cpu_roots`/`pids`; `stop()` at the end.
    """

    def __init__(self, cluster: StandaloneCluster, new_vm: WorkerSpec) -> None:
        self.cluster = cluster
        self.new_vm = new_vm
        self.vms: list[Vm] = [
            Vm(index=w.index, cores=cpu_cores(w.spec), worker=w, base=True, requested_t=time.time())
            for w in cluster.workers
        ]
        self._lock = threading.RLock()
        self._sc: Any = None
        self._driver_pid: int | None = None
        self._target = len(self.vms)
        self._refreshed = 0.0
        self._watcher: threading.Thread | None = None
        self._stopped = threading.Event()

    @classmethod
    def start(
        cls, run_dir: Path, base: WorkerSpec, new_vm: WorkerSpec, *, timeout_s: float = 120.0
    ) -> VmPool:
        """Start the master and the base VM's worker (blocks until it has registered)."""
        config = ClusterConfig(run_dir=run_dir, workers=(base,), start_timeout_s=timeout_s)
        cluster = StandaloneCluster(config).start()
        return cls(cluster, new_vm)

    @property
    def master_url(self) -> str:
        return self.cluster.master_url

    @property
    def base_vms(self) -> int:
        """The VMs the pool started with (never released)."""
        return sum(1 for vm in self.vms if vm.base)

    # ---- the application ----

    def attach(self, spark: Any, timeout_s: float = 120.0) -> None:
        """Bind to `spark`'s application: wait for the base VMs' executors, then hold the target to them."""
        self._sc = spark.sparkContext
        self._driver_pid = int(self._sc._gateway.proc.pid)
        deadline = time.monotonic() + timeout_s
        while self._read_driver() < len(self.vms):
            if time.monotonic() > deadline:
                raise VmPoolError(
                    f"the application got no executor on the base VM within {timeout_s:.0f} s",
                    hint=f"see the worker logs under {self.cluster.config.run_dir}",
                )
            time.sleep(WATCH_INTERVAL_S)
        self._apply_target()

    def prewarm(self, n: int, timeout_s: float = 120.0) -> None:
        """Start `n` VMs now and keep the application off them until `request` (VMInit's VMs)."""
        self._need_app()
        with self._lock:
            vms = [self._new_vm(0.0, warm=True) for _ in range(n)]
        for vm in vms:
            vm.worker.wait(timeout_s)

    def resize_base(self, cpus: frozenset[int]) -> None:
        """Give the base VM `cpus` until `reset`: its executor JVM and Python workers are pinned to them
        (a VM resized for a run: Over's, with every core of the drill). The executor, its compiled code
        and its Python workers stay, so the run needs no new JVM."""
        self._need_app()
        self._refresh(force=True)
        with self._lock:
            (vm,) = [v for v in self.vms if v.base]
            if vm.executor_pid is None:
                raise VmPoolError("the base VM has no executor to resize")
            pin_tree(vm.executor_pid, cpus)
            vm.cores = len(cpus)

    def reset(self, timeout_s: float = 120.0) -> None:
        """Back to the VMs the pool started with, for the application's next run: every VM added since
        (requested or pre-initialised) is released once it is up and forgotten, and a resized base VM
        gets its own cores back.

        A VM still booting cannot be cancelled (see `release`), so it is waited for: its executor would
        otherwise join the next run.
        """
        self._need_app()
        deadline = time.monotonic() + timeout_s
        while self.pending():
            if time.monotonic() > deadline:
                raise VmPoolError(f"a VM asked for did not come up within {timeout_s:.0f} s to be released")
            time.sleep(WATCH_INTERVAL_S)
        self.release(len(self.vms))  # every VM but the base VMs, which are never released
        with self._lock:
            self.vms = [vm for vm in self.vms if vm.base]
            self._target = len(self.vms)
            self._apply_target()
            for vm in self.vms:  # a resized base VM gets its own cores back
                spec = vm.worker.spec
                if vm.cores != cpu_cores(spec) and vm.executor_pid is not None:
                    pin_tree(vm.executor_pid, frozenset(spec.cpus))
                    vm.cores = cpu_cores(spec)

    def request(self, n: int, delay_s: float) -> list[Vm]:
        """Ask for `n` more VMs: pre-initialised ones first (usable in seconds), then new ones that start
        after `delay_s` (a VM's boot). Returns at once; `pending()`/`usable()` follow them."""
        if n < 0 or delay_s < 0:
            raise ConfigError(f"request needs n >= 0 and delay_s >= 0, got {n} and {delay_s}")
        self._need_app()
        now = time.time()
        with self._lock:
            warm = [vm for vm in self.vms if vm.state == "warm"][:n]
            for vm in warm:
                vm.requested_t = now
            fresh = [self._new_vm(delay_s, warm=False, requested_t=now) for _ in range(n - len(warm))]
            self._target += n
            self._apply_target()
        self._watch()
        return warm + fresh

    def release(self, n: int) -> int:
        """Give back up to `n` added VMs, newest first (best effort); returns how many were released.

        Only usable or pre-initialised VMs are released: a VM still booting cannot be cancelled
        (`StandaloneCluster` has no handle on its pending launch), and the base VMs stay.
        """
        self._need_app()
        with self._lock:
            candidates = [vm for vm in reversed(self.vms) if not vm.base and vm.state in ("usable", "warm")]
            chosen = candidates[:n]
            if not chosen:
                return 0
            self._target -= sum(1 for vm in chosen if vm.state == "usable")
            ids = [vm.executor_id for vm in chosen if vm.executor_id is not None]
            if ids:  # kill the executors through the driver first so it reschedules their tasks at once
                jvm = self._sc._jvm
                seq = jvm.org.apache.spark.api.python.PythonUtils.toSeq(ids)
                self._sc._jsc.sc().killExecutors(seq)
            self._apply_target()
            now = time.time()
            for vm in chosen:
                vm.released_t = now
                if vm.worker.pid is not None:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(vm.worker.pid, signal.SIGTERM)
        return len(chosen)

    # ---- what the loop reads ----

    def usable(self) -> int:
        """VMs whose executor is registered with the driver (the base VMs included)."""
        self._refresh()
        with self._lock:
            return sum(1 for vm in self.vms if vm.state == "usable")

    def pending(self) -> int:
        """VMs asked for whose executor has not registered yet (booting or starting their executor)."""
        self._refresh()
        with self._lock:
            return sum(1 for vm in self.vms if vm.state == "pending")

    def cores(self) -> int:
        """CPU cores of the usable VMs: what the application's tasks can run on now."""
        self._refresh()
        with self._lock:
            return sum(vm.cores for vm in self.vms if vm.state == "usable")

    def cpu_roots(self) -> list[int]:
        """The driver JVM and the executor JVMs; their descendants (Python workers) complete the VM side.

        For `policy.monitor.ProcessTreeCpu`, which walks the descendants itself. The master's and
        workers' daemon JVMs are left out: they idle, and a pre-initialised VM's daemon is not work.
        """
        with self._lock:
            roots = [self._driver_pid] if self._driver_pid else []
            return roots + [vm.executor_pid for vm in self.vms if vm.state == "usable" and vm.executor_pid]

    def pids(self) -> list[int]:
        """Every process of the VM side: the driver JVM, the executor JVMs and their Python workers."""
        return [p for root in self.cpu_roots() for p in [root, *descendants(root)] if alive(p)]

    def timeline(self, origin: float) -> list[dict[str, Any]]:
        with self._lock:
            return [vm.timeline(origin) for vm in self.vms]

    def executors(self) -> list[dict[str, Any]]:
        """The driver's view of every executor it has had (id, cores, tasks), e.g. to show where tasks ran."""
        self._need_app()
        store = self._sc._jsc.sc().statusStore().executorList(False)  # False: the removed ones too
        out = []
        for i in range(store.size()):
            e = store.apply(i)
            if e.id() == "driver":
                continue
            vm = next((v.index for v in self.vms if e.id() in v.executor_ids), None)
            out.append(
                {
                    "id": e.id(),
                    "vm": vm,
                    "active": bool(e.isActive()),
                    "task_slots": int(e.totalCores()),
                    "completed_tasks": int(e.completedTasks()),
                    "failed_tasks": int(e.failedTasks()),
                }
            )
        return sorted(out, key=lambda e: int(e["id"]) if e["id"].isdigit() else 0)

    def stop(self) -> None:
        self._stopped.set()
        self.cluster.stop()

    # ---- internals ----

    def _need_app(self) -> None:
        if self._sc is None:
            raise VmPoolError("the pool is not attached to an application", hint="call attach(spark) first")

    def _new_vm(self, delay_s: float, *, warm: bool, requested_t: float | None = None) -> Vm:
        spec = self.new_vm
        with thread_cpus(frozenset(spec.cpus)):
            worker = self.cluster.add_worker(spec, launch_delay_s=delay_s)
        vm = Vm(index=worker.index, cores=cpu_cores(spec), worker=worker, warm=warm, requested_t=requested_t)
        self.vms.append(vm)
        return vm

    def _apply_target(self) -> None:
        """Tell the master how many executors the application may have (one per VM in use)."""
        jvm = self._sc._jvm
        empty = jvm.org.apache.spark.api.python.PythonUtils.toScalaMap(jvm.java.util.HashMap())
        if not self._sc._jsc.sc().requestTotalExecutors(self._target, 0, empty):
            raise VmPoolError(
                "the scheduler refused to set the executor target",
                hint="VmPool needs a standalone master (spark://...)",
            )

    def _watch(self) -> None:
        """Poll the driver quickly while a VM is pending, to stamp when it became usable."""
        if self._watcher is not None and self._watcher.is_alive():
            return

        def loop() -> None:
            while not self._stopped.is_set():
                self._refresh(force=True)
                with self._lock:
                    if not any(vm.state == "pending" for vm in self.vms):
                        return
                self._stopped.wait(WATCH_INTERVAL_S)

        self._watcher = threading.Thread(target=loop, name="vm-pool-watch", daemon=True)
        self._watcher.start()

    def _refresh(self, force: bool = False) -> None:
        if self._sc is None:
            return
        if force or time.monotonic() - self._refreshed >= REFRESH_MAX_AGE_S:
            self._read_driver()

    def _read_driver(self) -> int:
        """Read the driver's registered executors and match new ones to their VMs; returns usable VMs."""
        seq = self._sc._jsc.sc().getExecutorIds()
        ids = {str(seq.apply(i)) for i in range(seq.size())}
        now = time.time()
        with self._lock:
            self._refreshed = time.monotonic()
            known = {vm.executor_id for vm in self.vms if vm.executor_id is not None}
            for executor_id in ids - known:
                self._match(executor_id, now)
            for vm in self.vms:  # an executor that left (killed, crashed) makes its VM unusable again
                if vm.executor_id is not None and vm.executor_id not in ids:
                    vm.executor_id = vm.executor_pid = None
            return sum(1 for vm in self.vms if vm.state == "usable")

    def _match(self, executor_id: str, now: float) -> None:
        """Find which VM's worker forked the executor `executor_id` (its command line names the id)."""
        for vm in self.vms:
            if vm.executor_id is not None or vm.worker.pid is None or vm.released_t is not None:
                continue
            for pid in descendants(vm.worker.pid):
                args = cmdline(pid)
                is_executor = any(a.endswith(EXECUTOR_CLASS) for a in args)
                if is_executor and _arg(args, "--executor-id") == executor_id:
                    vm.executor_id, vm.executor_pid = executor_id, pid
                    vm.executor_ids.append(executor_id)
                    if vm.requested_t is None:  # a warm VM never gets an executor before its request
                        vm.requested_t = now
                    vm.usable_t = vm.usable_t or now
                    return


def cmdline(pid: int) -> list[str]:
    """`pid`'s arguments; [] when it has exited meanwhile or cannot be read."""
    try:
        return psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def _arg(args: list[str], name: str) -> str | None:
    with contextlib.suppress(ValueError, IndexError):
        return args[args.index(name) + 1]
    return None

"""The VM pool on a real standalone cluster: a pre-initialised VM (VMInit) is registered but gets no
executor until it is requested, then one within seconds; tasks run on both VMs; a released VM's executor
and worker go; the base VM is resized to more cores for a while, then back. The Spark driver
runs in a child process: the test run's shared local session owns this process's SparkContext (see
test_cluster.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.spark.affinity import thread_cpus
from core.spark.cluster_config import WorkerSpec
from core.spark.vm_pool import Vm, cpu_cores

pytestmark = pytest.mark.solo

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CPUS = sorted(os.sched_getaffinity(0))


def drive(run_dir: str) -> None:
    """The driver process: base VM on the first CPU, one pre-initialised VM on the second."""
    from core.spark.session import SparkConfig, spark_session
    from core.spark.vm_pool import VmPool

    def where(_: object) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def cores_used() -> list[int]:
        """Per VM, the cores the master has given to applications (its decision, made when a worker
        registers or the executor target changes)."""
        used = {w["port"]: w["coresused"] for w in pool.cluster.alive_workers()}
        return [used.get(vm.worker.port, -1) for vm in pool.vms]

    os.sched_setaffinity(0, {CPUS[0]})  # as the drill's child: the driver on the base VM's CPU
    pool = VmPool.start(Path(run_dir), WorkerSpec(cpus=(CPUS[0],)), WorkerSpec(cpus=(CPUS[1],)))
    try:
        spark = spark_session(SparkConfig(master=pool.master_url, conf=(("spark.locality.wait", "0"),)))
        pool.attach(spark)
        pool.prewarm(1)  # returns once the master lists the worker: it has decided about executors on it
        out: dict[str, object] = {
            "warm": [pool.usable(), pool.pending(), pool.cores(), len(pool.cluster.alive_workers())],
            "cores_used_warm": cores_used(),
            "executors_warm": len(pool.executors()),
        }
        asked = time.monotonic()
        pool.request(1, 0.0)
        out["pending_after_request"] = pool.pending()
        while pool.usable() < 2 and time.monotonic() - asked < 60:
            time.sleep(0.1)
        out["usable_s"] = time.monotonic() - asked
        out["both"] = [pool.usable(), pool.pending(), pool.cores()]
        out["pids"] = len(pool.pids())
        sc = spark.sparkContext
        if pool.usable() == 2:  # a barrier stage launches its two tasks at once: one per VM's one core
            tasks = sc.parallelize(range(2), 2).barrier().mapPartitions(lambda _: [where(None)])
            out["affinity"] = sorted({tuple(a) for a in tasks.collect()})
        out["released"] = pool.release(1)
        released = time.monotonic()
        while pool.usable() > 1 and time.monotonic() - released < 60:  # the driver drops the executor
            time.sleep(0.1)
        out["after_release"] = [pool.usable(), pool.pending(), pool.cores()]
        out["tasks_after_release"] = sc.parallelize(range(4), 4).map(lambda x: x).count()
        out["timeline"] = pool.timeline(time.time())
        out["executor_list"] = pool.executors()
        # Over's run: the base VM resized to both cores, then back to its own.
        pool.resize_base(frozenset(CPUS[:2]))
        out["resized"] = [pool.usable(), pool.pending(), pool.cores()]
        out["resized_affinity"] = sorted({tuple(a) for a in sc.parallelize(range(2), 2).map(where).collect()})
        pool.reset()
        out["reset"] = [pool.usable(), pool.pending(), pool.cores(), len(pool.vms)]
        out["reset_affinity"] = sorted({tuple(a) for a in sc.parallelize(range(2), 2).map(where).collect()})
        print(json.dumps(out), flush=True)
        spark.stop()
    finally:
        pool.stop()


DRIVE = "import sys; from tests.core.spark.test_vm_pool import drive; drive(sys.argv[1])"


def test_cpu_cores_count_pinned_cpus_not_task_slots() -> None:
    assert cpu_cores(WorkerSpec(cores=2, cpus=(0,))) == 1
    assert cpu_cores(WorkerSpec(cores=3)) == 3


def test_a_vm_is_warm_then_pending_then_usable_then_released() -> None:
    class Worker:
        launched_at = registered_at = None

    vm = Vm(index=1, cores=1, worker=Worker())  # type: ignore[arg-type]
    assert vm.state == "warm"
    vm.requested_t = 100.0
    assert vm.state == "pending"
    vm.executor_id, vm.usable_t = "1", 104.5
    assert vm.state == "usable"
    assert vm.timeline(origin=90.0)["request_to_usable_s"] == 4.5
    vm.executor_id, vm.released_t = None, 120.0
    assert vm.state == "released" and vm.timeline(90.0)["released_s"] == 30.0


def test_the_calling_thread_may_use_more_cpus_for_a_moment() -> None:
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {CPUS[0]})
    try:
        with thread_cpus(frozenset(CPUS)):
            assert os.sched_getaffinity(0) == set(CPUS)
        assert os.sched_getaffinity(0) == {CPUS[0]}
    finally:
        os.sched_setaffinity(0, before)


@pytest.mark.spark
@pytest.mark.slow
@pytest.mark.skipif(len(CPUS) < 2, reason="the two VMs are pinned to different CPUs")
def test_a_preinitialised_vm_gets_an_executor_only_when_requested(tmp_path: Path) -> None:
    driver = subprocess.run(
        [sys.executable, "-c", DRIVE, str(tmp_path / "cluster")],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    lines = [line for line in driver.stdout.splitlines() if line.startswith("{")]
    assert driver.returncode == 0 and lines, driver.stderr[-2000:]
    out = json.loads(lines[-1])
    print(f"\npre-initialised VM usable {out['usable_s']:.1f} s after the request")
    assert out["warm"] == [1, 0, 1, 2]  # two workers registered, one usable VM, one core
    assert out["cores_used_warm"] == [1, 0]  # the master gave the warm VM's core to no application ...
    assert out["executors_warm"] == 1  # ... so the warm VM holds no executor
    assert out["pending_after_request"] == 1
    assert out["both"] == [2, 0, 2]  # within the driver's bounded wait (how soon: the drill's reaction_s)
    assert out["pids"] >= 3  # the driver JVM and two executor JVMs (and their Python workers)
    assert out["affinity"] == [[CPUS[0]], [CPUS[1]]]  # tasks ran on both VMs
    assert out["released"] == 1 and out["after_release"] == [1, 0, 1]
    assert out["tasks_after_release"] == 4  # the application goes on with the base VM
    warm = out["timeline"][1]
    assert warm["warm"] and warm["state"] == "released" and warm["executor_ids"] == ["1"]
    assert [(e["id"], e["vm"]) for e in out["executor_list"]] == [("0", 0), ("1", 1)]
    assert out["executor_list"][1]["completed_tasks"] > 0
    # Resized, the base VM's executor and Python workers ran on both cores; reset, on its own again.
    assert out["resized"] == [1, 0, 2] and out["resized_affinity"] == [[CPUS[0], CPUS[1]]]
    assert out["reset"] == [1, 0, 1, 1] and out["reset_affinity"] == [[CPUS[0]]]

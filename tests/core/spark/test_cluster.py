"""The standalone cluster on 127.0.0.1: an application gains an executor when a "VM" (worker) joins.

The Spark driver runs in a child process: the test run's shared local session (tests/conftest.py) owns
this process's SparkContext, and a JVM holds only one. Time stamps are time.monotonic(), which is
CLOCK_MONOTONIC, shared by all processes on the machine.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.spark import cluster as cluster_module
from core.spark.cluster import ClusterError, StandaloneCluster, alive, descendants
from core.spark.cluster_config import ClusterConfig, WorkerSpec

pytestmark = pytest.mark.solo

PROJECT_ROOT = Path(__file__).resolve().parents[3]
CPUS = sorted(os.sched_getaffinity(0))
PIN = len(CPUS) >= 2  # pin the two "VMs" to different cores when there are two


def drive(master_url: str) -> None:
    """The driver process: a job on the first executor, then wait for a second one and use both."""
    from core.spark.session import SparkConfig, spark_session

    def emit(**event: object) -> None:
        print(json.dumps(event), flush=True)

    def executors(sc) -> int:  # getExecutorInfos lists the driver too
        return len(sc._jsc.sc().statusTracker().getExecutorInfos()) - 1

    def where(_: object) -> list[int]:
        return sorted(os.sched_getaffinity(0))

    def on_each_executor(sc) -> list[tuple[int, ...]]:
        """The CPU masks tasks ran under, one task per executor: a barrier stage launches its tasks all at
        once, so with one task per slot (each executor has one core) every executor runs one."""
        tasks = sc.parallelize(range(2), 2).barrier().mapPartitions(lambda _: [where(None)])
        return sorted({tuple(a) for a in tasks.collect()})

    t0 = time.monotonic()
    spark = spark_session(SparkConfig(master=master_url, app_name="sponge-cluster-test"))
    sc = spark.sparkContext
    total = sc.parallelize(range(1000), 2).map(lambda x: x * 2).sum()
    emit(
        event="first_job",
        total=total,
        executors=executors(sc),
        session_s=time.monotonic() - t0,
        affinity=sorted({tuple(a) for a in sc.parallelize(range(2), 2).map(where).collect()}),
    )
    sys.stdin.readline()  # the test has asked for a second worker
    deadline = time.monotonic() + 45
    while executors(sc) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    seen_at = time.monotonic()
    affinity = on_each_executor(sc) if executors(sc) == 2 else []  # a barrier stage needs both slots
    emit(event="second_executor", executors=executors(sc), seen_at=seen_at, affinity=affinity)
    spark.stop()


def _executor_jvms(worker_pid: int) -> list[int]:
    return [p for p in descendants(worker_pid) if "CoarseGrainedExecutorBackend" in _cmdline(p)]


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def _cpus_allowed(pid: int) -> str:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("Cpus_allowed_list:"):
            return line.split(":", 1)[1].strip()
    return ""


def _gone(pids: list[int], within_s: float) -> list[int]:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


def test_bad_worker_specs_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pin"):
        ClusterConfig(run_dir=tmp_path, workers=(WorkerSpec(cpus=(max(CPUS) + 1,)),))
    with pytest.raises(ConfigError, match="512 MB") as small:
        ClusterConfig(run_dir=tmp_path, workers=(WorkerSpec(memory_mb=128),))
    assert "executor" in small.value.hint
    with pytest.raises(ConfigError):
        ClusterConfig(run_dir=tmp_path, workers=(WorkerSpec(cores=0),))


def test_a_relative_run_dir_is_made_absolute_so_the_daemons_paths_do_not_nest_in_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The daemons run in run_dir: a worker handed `runs/x/work-0` wrote to runs/x/runs/x/work-0.
    monkeypatch.chdir(tmp_path)
    assert ClusterConfig(run_dir=Path("runs/x")).run_dir == tmp_path / "runs" / "x"


@pytest.mark.spark
@pytest.mark.slow
def test_an_application_gains_an_executor_when_a_worker_joins(tmp_path: Path) -> None:
    first = WorkerSpec(cores=1, cpus=(CPUS[0],) if PIN else ())
    second = WorkerSpec(cores=1, cpus=(CPUS[1],) if PIN else ())
    cluster = StandaloneCluster(ClusterConfig(run_dir=tmp_path / "cluster", workers=(first,)))
    driver = None
    pids: list[int] = []
    try:
        cluster.start()
        print(
            f"\nmaster ready {cluster.timings['master_ready_s']:.1f} s, "
            f"master + 1 worker registered {cluster.timings['cluster_ready_s']:.1f} s"
        )
        assert len(cluster.alive_workers()) == 1
        driver = subprocess.Popen(
            [sys.executable, "-c", DRIVE, cluster.master_url],
            cwd=PROJECT_ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert driver.stdout is not None and driver.stdin is not None
        one = json.loads(driver.stdout.readline() or "{}")
        assert one.get("event") == "first_job", "the driver failed before its first job"
        assert one["total"] == 999_000 and one["executors"] == 1
        print(f"session on the cluster + first job {one['session_s']:.1f} s")
        if PIN:
            # Executors and their Python workers inherit the worker's CPU mask.
            assert one["affinity"] == [[CPUS[0]]]
            (executor,) = _executor_jvms(cluster.workers[0].pid or 0)
            assert _cpus_allowed(executor) == str(CPUS[0])

        pending = cluster.add_worker(second, launch_delay_s=2.0)
        driver.stdin.write("go\n")
        driver.stdin.flush()
        assert not pending.registered  # still "booting"
        pending.wait(60)
        assert pending.launched_at is not None and pending.launched_at - pending.requested_at >= 2.0
        assert len(cluster.alive_workers()) == 2
        two = json.loads(driver.stdout.readline() or "{}")
        assert two.get("event") == "second_executor" and two["executors"] == 2
        usable_s = two["seen_at"] - pending.launched_at
        print(
            f"add_worker: launched {pending.launched_at - pending.requested_at:.1f} s after the call, "
            f"registered {pending.registration_s:.1f} s after launch, "
            f"executor usable {usable_s:.1f} s after launch"
        )
        if PIN:
            assert two["affinity"] == [[CPUS[0]], [CPUS[1]]]  # tasks ran on both "VMs"
            (executor,) = _executor_jvms(pending.pid or 0)
            assert _cpus_allowed(executor) == str(CPUS[1])
        else:
            assert len(two["affinity"]) >= 1
        pids = cluster.pids()
        assert driver.wait(30) == 0
    finally:
        if driver is not None and driver.poll() is None:
            driver.kill()
        pids = pids or cluster.pids()
        cluster.stop()
    assert pids and _gone(pids, within_s=30) == []  # a bounded wait: it ends when the JVMs are gone


DRIVE = "import sys; from tests.core.spark.test_cluster import drive; drive(sys.argv[1])"
ORPHAN_SCRIPT = """
import json, sys, time
from pathlib import Path
from core.spark.cluster import StandaloneCluster
from core.spark.cluster_config import ClusterConfig, WorkerSpec
c = StandaloneCluster(ClusterConfig(run_dir=Path(sys.argv[1]), workers=(WorkerSpec(),))).start()
print(json.dumps(c.pids()), flush=True)
time.sleep(600)
"""


@pytest.mark.spark
@pytest.mark.slow
def test_a_killed_owner_leaves_no_master_or_worker(tmp_path: Path) -> None:
    owner = subprocess.Popen(
        [sys.executable, "-c", ORPHAN_SCRIPT, str(tmp_path)],
        cwd=PROJECT_ROOT,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert owner.stdout is not None
        pids = json.loads(owner.stdout.readline() or "[]")
        assert len(pids) >= 2 and all(alive(p) for p in pids)
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert _gone(pids, within_s=30) == []  # a bounded wait: it ends when the JVMs are gone


@pytest.mark.spark
@pytest.mark.slow
def test_a_master_whose_ports_were_taken_meanwhile_is_found_on_the_ports_it_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another binder takes the picked ports before the JVM starts: Spark binds the next ones up."""
    held = [socket.create_server(("127.0.0.1", 0)) for _ in range(2)]
    taken = [s.getsockname()[1] for s in held]
    pick = cluster_module.free_port
    monkeypatch.setattr(
        cluster_module, "free_port", lambda host="127.0.0.1": taken.pop(0) if taken else pick(host)
    )
    try:
        with StandaloneCluster(ClusterConfig(run_dir=tmp_path, start_timeout_s=60)) as cluster:
            assert cluster.status() is not None
            assert {cluster.master_port, cluster.webui_port}.isdisjoint(s.getsockname()[1] for s in held)
    finally:
        for s in held:
            s.close()


@pytest.mark.spark
def test_a_master_that_exits_fails_the_start_at_once_with_its_log(tmp_path: Path) -> None:
    home = tmp_path / "spark"
    (home / "bin").mkdir(parents=True)
    launcher = home / "bin" / "spark-class"
    launcher.write_text("#!/bin/sh\necho 'Error: could not reserve enough space for object heap'\nexit 3\n")
    launcher.chmod(0o755)
    (tmp_path / "run").mkdir()  # a reused run directory: its log holds an earlier master's lines
    (tmp_path / "run" / "master.log").write_text("Successfully started service 'MasterUI' on port 9\n")
    started = time.monotonic()
    with pytest.raises(ClusterError, match="exited with 3") as failed:
        StandaloneCluster(ClusterConfig(run_dir=tmp_path / "run", spark_home=home)).start()
    assert "object heap" in str(failed.value) and "port 9" not in str(failed.value)
    assert time.monotonic() - started < 30  # not the 90 s start timeout

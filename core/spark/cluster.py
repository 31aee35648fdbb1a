"""A Spark standalone cluster on 127.0.0.1, for drills that add "VMs" (persistent bursts, VMBase).

Why: Spark's local[N] is one executor that cannot grow, so a drill that buys VMs needs real executor
processes that join a running application. Here a master and each worker are separate JVMs started
from the pip pyspark package (`$SPARK_HOME/bin/spark-class ...deploy.master.Master` / `...Worker`,
SPARK_HOME = the package dir). A running application keeps asking for cores (spark.cores.max unset),
so when `add_worker` brings up a new worker, the master launches an executor for it there: that is
the new VM becoming usable. `launch_delay_s` models the VM's boot.

How the processes are kept in hand:
* every process is its own process group (setsid), so `stop()` signals the worker and the executors it
  forked at once (executors inherit the group; PySpark's daemon leaves it, so stop() also kills any
  descendant still alive);
* every process asks the kernel to SIGKILL it when its parent dies (core/parent_death.py, as the
  embedded Lambda fleet does), so a SIGKILLed Python leaves no master or worker behind; an executor
  whose worker dies exits by itself (Spark's WorkerWatcher). Linux sends that signal when the *thread*
  that forked the child ends, so all processes are started from one thread that lives as long as the
  cluster;
* what they fork is found, watched and killed through psutil (`descendants`, `alive`, `stop()`), whose
  handles refuse to signal a pid the system has meanwhile given to another process;
* `WorkerSpec.cpus` pins a worker with sched_setaffinity before exec (the same as `taskset -c`); the
  executors and Python workers it forks inherit the mask (tests/core/spark/test_cluster.py checks).

Everything binds to 127.0.0.1 on free ports; the master's REST submission server is off, its web UI
(needed for the JSON status endpoint) and the workers' are on free ports; logs go to the run directory.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import psutil

from core import parent_death
from core.errors import ConfigError, MissingDependencyError, SpongeError
from core.spark.cluster_config import ClusterConfig, WorkerSpec
from core.spark.java import check_java

MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"


LOG_TAIL_LINES = 15


class ClusterError(SpongeError):
    """The standalone cluster did not come up, or a worker did not register in time."""


def pyspark_home() -> Path:
    """The pip pyspark package directory, which ships bin/spark-class and the jars (SPARK_HOME)."""
    import pyspark

    return Path(pyspark.__file__).resolve().parent


@dataclass
class PendingWorker:
    """A worker asked for by `add_worker`: it launches after its delay and registers with the master.

    Times are time.monotonic() stamps: requested_at (the call), launched_at (process started, after the
    delay), registered_at (the master lists it ALIVE). `wait()` blocks until registered or failed.
    """

    index: int
    spec: WorkerSpec
    launch_delay_s: float
    port: int
    requested_at: float
    launched_at: float | None = None
    registered_at: float | None = None
    worker_id: str | None = None
    pid: int | None = None
    error: BaseException | None = None
    _done: threading.Event = field(default_factory=threading.Event, repr=False)

    @property
    def registered(self) -> bool:
        return self.registered_at is not None

    @property
    def registration_s(self) -> float | None:
        """Seconds from the process start (after the launch delay) to registration with the master."""
        if self.launched_at is None or self.registered_at is None:
            return None
        return self.registered_at - self.launched_at

    def wait(self, timeout_s: float | None = None) -> PendingWorker:
        if not self._done.wait(timeout_s):
            raise ClusterError(
                f"worker {self.index} did not register within {timeout_s} s",
                hint="see its log in the cluster's run directory",
            )
        if self.error is not None:
            raise self.error
        return self


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now (the kernel's pick). Another binder may take it before the JVM does; Spark
    then binds the next port up, and the cluster reads the port it really bound from the log."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


def _arm_child(cpus: tuple[int, ...]) -> Callable[[], None]:
    """preexec_fn: die with the parent thread (core/parent_death.py), then pin to `cpus` if any."""

    def pin() -> None:
        os.sched_setaffinity(0, cpus)

    return parent_death.preexec_fn(pin if cpus else None)


def _descendants(pid: int) -> list[psutil.Process]:
    """The live descendants of `pid`, as psutil handles (a kill through one cannot hit a reused pid)."""
    try:
        return psutil.Process(pid).children(recursive=True)
    except (psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
        return []


def descendants(pid: int) -> list[int]:
    """Every live descendant of `pid` (children, grandchildren, ...); [] once `pid` is gone."""
    return [p.pid for p in _descendants(pid)]


def alive(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (a zombie has exited; it only waits to be reaped)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.NoSuchProcess, psutil.ZombieProcess):
        return False
    except psutil.AccessDenied:  # someone else's process, but it exists
        return True


class StandaloneCluster:
    """A Spark standalone master and workers on this machine; use as a context manager or call stop().

    `start()` returns once the master answers and every configured worker has registered, and records
    how long that took in `timings`. `add_worker()` returns at once with a PendingWorker.
    """

    def __init__(self, config: ClusterConfig) -> None:
        self.config = config
        self.spark_home = config.spark_home or pyspark_home()
        self.master_port = 0
        self.webui_port = 0
        self.timings: dict[str, float] = {}
        self.workers: list[PendingWorker] = []
        self._procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []
        self._indexes = itertools.count()
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        # One long-lived thread starts every process: PR_SET_PDEATHSIG fires when the forking thread ends.
        self._spawner = ThreadPoolExecutor(1, thread_name_prefix="cluster-spawner")
        self._started = False
        self._log_starts: dict[str, int] = {}  # where each process's own lines start in its log

    # ---- addresses ----

    @property
    def master_url(self) -> str:
        return f"spark://{self.config.host}:{self.master_port}"

    @property
    def webui_url(self) -> str:
        return f"http://{self.config.host}:{self.webui_port}"

    # ---- lifecycle ----

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> StandaloneCluster:
        if self._started:
            raise ClusterError("the cluster is already started")
        self._started = True
        spark_class = self.spark_home / "bin" / "spark-class"
        if not spark_class.exists():
            raise MissingDependencyError(
                f"{spark_class} not found",
                hint="install pyspark (make setup) or set ClusterConfig.spark_home",
            )
        check_java()
        self.config.run_dir.mkdir(parents=True, exist_ok=True)
        self.conf_dir.mkdir(exist_ok=True)
        t0 = time.monotonic()
        try:
            master = self._start_master()

            def answering() -> bool:
                self._check_running(master, "the master", "master.log")
                bound = self._bound_ports("master.log")
                self.master_port = bound.get("sparkMaster", self.master_port)
                self.webui_port = bound.get("MasterUI", self.webui_port)
                return self.status() is not None

            self._wait(answering, "the master's web UI to answer", "master.log")
            self.timings["master_ready_s"] = time.monotonic() - t0
            pending = [self.add_worker(spec) for spec in self.config.workers]
            deadline = t0 + self.config.start_timeout_s
            for p in pending:
                p.wait(max(0.0, deadline - time.monotonic()))
        except BaseException:
            self.stop()
            raise
        self.timings["cluster_ready_s"] = time.monotonic() - t0
        return self

    def add_worker(
        self,
        spec: WorkerSpec = WorkerSpec(),  # noqa: B008 - a frozen dataclass, safe to share
        launch_delay_s: float = 0.0,
        on_registered: Callable[[PendingWorker], None] | None = None,
    ) -> PendingWorker:
        """Start a worker after `launch_delay_s` (a VM's boot) in the background; returns at once.

        The returned PendingWorker is stamped when the process starts and when the master lists the
        worker ALIVE; `on_registered` is then called from the background thread.
        """
        if not self._started or self._stopping.is_set():
            raise ClusterError("the cluster is not running", hint="call start() first")
        if launch_delay_s < 0:
            raise ConfigError(f"the launch delay must be >= 0, got {launch_delay_s}")
        spec.validate(frozenset(os.sched_getaffinity(0)), self.config.executor_memory_mb)
        pending = PendingWorker(
            index=next(self._indexes),
            spec=spec,
            launch_delay_s=launch_delay_s,
            port=free_port(self.config.host),
            requested_at=time.monotonic(),
        )
        with self._lock:
            self.workers.append(pending)
        threading.Thread(
            target=self._bring_up, args=(pending, on_registered), name=f"worker-{pending.index}", daemon=True
        ).start()
        return pending

    def stop(self, grace_s: float = 5.0) -> None:
        """Kill the workers (and their executors), then the master; nothing of theirs survives."""
        self._stopping.set()
        with self._lock:
            procs = list(reversed(self._procs))  # workers before the master
        family = {p.pid: _descendants(p.pid) for p in procs}
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for p in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(max(0.0, deadline - time.monotonic()))
        for p in procs:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(p.pid, signal.SIGKILL)
            # PySpark's daemon makes its own process group: kill whatever of the tree is left.
            for child in family[p.pid] + _descendants(p.pid):
                with contextlib.suppress(psutil.NoSuchProcess, psutil.ZombieProcess, psutil.AccessDenied):
                    child.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                p.wait(grace_s)
        for log in self._logs:
            log.close()
        self._spawner.shutdown(wait=False)

    # ---- status ----

    def status(self) -> dict[str, Any] | None:
        """The master's JSON status (workers, apps, cores), or None while it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.webui_url}/json/", timeout=2.0) as r:
                return json.loads(r.read().decode())
        except (urllib.error.URLError, OSError, ValueError):
            return None

    def alive_workers(self) -> list[dict[str, Any]]:
        status = self.status() or {}
        return [w for w in status.get("workers", []) if w.get("state") == "ALIVE"]

    def pids(self) -> list[int]:
        """The master's and workers' JVM pids and everything they forked (executors, Python workers)."""
        with self._lock:
            roots = [p.pid for p in self._procs]
        return [pid for root in roots for pid in [root, *descendants(root)] if alive(pid)]

    # ---- internals ----

    @property
    def conf_dir(self) -> Path:
        """An empty SPARK_CONF_DIR: the class archive's when there is one (it is on the class path the
        archive was recorded with), else the run's own."""
        archive = self.config.class_archive
        return archive.conf_dir if archive is not None else self.config.run_dir / "conf"

    def _env(self) -> dict[str, str]:
        archive = self.config.class_archive
        daemon_cds = archive.daemon_options() if archive else ""
        env = dict(os.environ)
        env.update(
            SPARK_HOME=str(self.spark_home),
            SPARK_CONF_DIR=str(self.conf_dir),  # no stray spark-env.sh or defaults
            SPARK_LOCAL_IP=self.config.host,
            SPARK_DAEMON_MEMORY=f"{self.config.daemon_memory_mb}m",
            SPARK_DAEMON_JAVA_OPTS=f"{self.config.daemon_java_opts} {daemon_cds}".rstrip(),
            SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
            PYSPARK_PYTHON=self.config.python,
        )
        env.update(self.config.extra_env)
        return env

    def _spawn(self, args: list[str], log_name: str, cpus: tuple[int, ...]) -> subprocess.Popen[bytes]:
        log = open(self.config.run_dir / log_name, "ab")  # noqa: SIM115 - closed by stop()
        self._log_starts[log_name] = log.tell()  # a reused run directory's log holds an earlier run
        cmd = [str(self.spark_home / "bin" / "spark-class"), *args]
        proc = self._spawner.submit(
            subprocess.Popen,
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self._env(),
            cwd=str(self.config.run_dir),
            start_new_session=True,
            preexec_fn=_arm_child(cpus),
        ).result()
        with self._lock:
            self._logs.append(log)
            self._procs.append(proc)
            if self._stopping.is_set():  # stop() ran meanwhile: do not leave this one behind
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                raise ClusterError("the cluster stopped while a worker was starting")
        return proc

    def _start_master(self) -> subprocess.Popen[bytes]:
        host = self.config.host
        self.master_port, self.webui_port = free_port(host), free_port(host)
        return self._spawn(
            [
                MASTER_CLASS,
                "--host",
                host,
                "--port",
                str(self.master_port),
                "--webui-port",
                str(self.webui_port),
            ],
            "master.log",
            (),
        )

    def _bring_up(
        self, pending: PendingWorker, on_registered: Callable[[PendingWorker], None] | None
    ) -> None:
        try:
            if self._stopping.wait(pending.launch_delay_s):
                raise ClusterError("the cluster stopped before the worker launched")
            spec, host = pending.spec, self.config.host
            log_name = f"worker-{pending.index}.log"
            proc = self._spawn(
                [
                    WORKER_CLASS,
                    "--host",
                    host,
                    "--port",
                    str(pending.port),
                    "--webui-port",
                    str(free_port(host)),
                    "--cores",
                    str(spec.cores),
                    "--memory",
                    f"{spec.memory_mb}m",
                    "--work-dir",
                    str(self.config.run_dir / f"work-{pending.index}"),
                    self.master_url,
                ],
                log_name,
                spec.cpus,
            )
            pending.pid, pending.launched_at = proc.pid, time.monotonic()

            def registered() -> bool:
                self._check_running(proc, f"worker {pending.index}", log_name)
                pending.port = self._bound_ports(log_name).get("sparkWorker", pending.port)
                for w in self.alive_workers():
                    if w.get("port") == pending.port:
                        pending.worker_id = str(w.get("id"))
                        return True
                return False

            self._wait(registered, f"worker {pending.index} to register", log_name)
            pending.registered_at = time.monotonic()
        except BaseException as e:  # handed to wait(); a daemon thread must not die silently
            pending.error = e
        finally:
            pending._done.set()
        if pending.error is None and on_registered is not None:
            on_registered(pending)

    def _bound_ports(self, log_name: str) -> dict[str, int]:
        """The ports Spark says it bound, by service ("Successfully started service ..."), once logged."""
        found = re.findall(r"started service '(\w+)' on port (\d+)", self._log_text(log_name))
        return {service: int(port) for service, port in found}

    def _log_text(self, log_name: str) -> str:
        """What the process now writing `log_name` has written to it."""
        try:
            with open(self.config.run_dir / log_name, "rb") as f:
                f.seek(self._log_starts.get(log_name, 0))
                return f.read().decode(errors="replace")
        except OSError:
            return ""

    def _failure(self, message: str, log_name: str) -> ClusterError:
        """An error carrying the last lines of the process's log: CI keeps the message, not the file."""
        tail = "\n".join(self._log_text(log_name).splitlines()[-LOG_TAIL_LINES:])
        return ClusterError(
            f"{message}; the last lines of {log_name}:\n{tail}",
            hint=f"see {self.config.run_dir / log_name}",
        )

    def _check_running(self, proc: subprocess.Popen[bytes], who: str, log_name: str) -> None:
        if proc.poll() is not None:
            raise self._failure(f"{who} exited with {proc.returncode}", log_name)

    def _wait(self, ready: Callable[[], bool], what: str, log_name: str) -> None:
        deadline = time.monotonic() + self.config.start_timeout_s
        while not ready():
            if self._stopping.is_set():
                raise ClusterError(f"the cluster stopped while waiting for {what}")
            if time.monotonic() > deadline:
                timeout = self.config.start_timeout_s
                raise self._failure(f"timed out after {timeout} s waiting for {what}", log_name)
            time.sleep(self.config.poll_interval_s)

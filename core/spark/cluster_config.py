"""What a standalone cluster is asked to be: its workers ("VMs") and its daemons, validated up front.

Why apart from the cluster (core/spark/cluster.py): a drill or a VM pool describes the VMs it will
buy (`WorkerSpec`) long before any process starts, and a bad spec (too little memory for an executor,
a CPU this process may not use) must fail there, as a ConfigError, not as a worker that never joins.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from core.errors import ConfigError
from core.spark.class_archive import ClassArchive
from core.spark.python_launcher import launcher

MIN_WORKER_MEMORY_MB = 512


@dataclass(frozen=True)
class WorkerSpec:
    """One worker ("VM"): cores and memory it offers, and the CPUs it is pinned to (empty: not pinned).

    memory_mb must cover an executor's spark.executor.memory (1g by default; a run's --executor-memory)
    or no executor starts: a drill's VMs offer exactly their executor's heap (core/drill/run_policy.py).
    """

    cores: int = 1
    memory_mb: int = 1024
    cpus: tuple[int, ...] = ()

    def validate(self, available_cpus: frozenset[int], executor_memory_mb: int | None = None) -> None:
        """Refuse a worker that cannot exist here, or that cannot hold an executor of `executor_memory_mb`."""
        if not isinstance(self.cores, int) or self.cores < 1:
            raise ConfigError(f"a worker needs >= 1 core, got {self.cores!r}")
        if self.memory_mb < MIN_WORKER_MEMORY_MB:
            raise ConfigError(
                f"a worker needs >= {MIN_WORKER_MEMORY_MB} MB, got {self.memory_mb}",
                hint="it must fit an executor (spark.executor.memory, 1g by default)",
            )
        if executor_memory_mb is not None and self.memory_mb < executor_memory_mb:
            raise ConfigError(
                f"a worker of {self.memory_mb} MB cannot hold an executor of {executor_memory_mb} MB",
                hint="give the worker at least the executor's memory, or lower --executor-memory",
            )
        unknown = sorted(set(self.cpus) - available_cpus)
        if unknown:
            raise ConfigError(
                f"cannot pin a worker to CPUs {unknown}",
                hint=f"this process may use CPUs {sorted(available_cpus)}",
            )


@dataclass(frozen=True)
class ClusterConfig:
    """A master and the workers it starts with; `run_dir` receives the logs and the workers' work dirs.

    spark_home: None means the pip pyspark package. python: the interpreter PySpark workers run (must
    have the project installed). daemon_memory_mb and daemon_java_opts: heap and flags of the master
    and worker JVMs, not of executors. executor_memory_mb: the executors' heap the application will ask
    for (its spark.executor.memory), which every worker must offer; None: not checked. The default
    daemon flags (serial GC, C1 JIT only) halve their start-up on a busy two-core machine (about 10 s to
    5 s for a master and a worker); they do little work after.
    """

    run_dir: Path
    workers: tuple[WorkerSpec, ...] = (WorkerSpec(),)
    host: str = "127.0.0.1"
    spark_home: Path | None = None
    python: str = field(default_factory=launcher)
    daemon_memory_mb: int = 256
    daemon_java_opts: str = "-XX:+UseSerialGC -XX:TieredStopAtLevel=1"
    start_timeout_s: float = 90.0
    poll_interval_s: float = 0.1
    extra_env: Mapping[str, str] = field(default_factory=dict)
    executor_memory_mb: int | None = None
    # The archive the daemons map (core/spark/class_archive.py); None: none, and a conf dir of the run's own.
    class_archive: ClassArchive | None = field(default_factory=ClassArchive.installed)

    def __post_init__(self) -> None:
        # The daemons run in run_dir and are handed paths under it: a relative one would nest there.
        object.__setattr__(self, "run_dir", Path(self.run_dir).absolute())
        if self.daemon_memory_mb < 64:
            raise ConfigError(f"daemon_memory_mb must be >= 64, got {self.daemon_memory_mb}")
        if self.start_timeout_s <= 0 or self.poll_interval_s <= 0:
            raise ConfigError("start_timeout_s and poll_interval_s must be positive")
        available = frozenset(os.sched_getaffinity(0))
        for spec in self.workers:
            spec.validate(available, self.executor_memory_mb)

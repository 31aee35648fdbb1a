"""Build the local SparkSession the runs, tests and benches share, after checking Java is usable; and
the memory it runs with (`MemoryConfig`), sized from the machine unless a flag says otherwise.

Memory: Spark's own defaults (a 1 GiB driver heap, the HDFS-backed state store keeping every key on
that heap) let a stateful query die of `OutOfMemoryError` on a machine with plenty of RAM. So the
driver's and executors' heaps, the state store and RocksDB's memory are configuration: typed and
validated here, sized from the machine's RAM by `MemoryConfig.sized` (the CLI reads the machine once,
`MachineMemory.detect`, and passes the result down), recorded in each run's summary.json.

The JVM: when `SparkConfig.jvm_log` is set, the JVM this process launches writes its stdout and stderr
(Spark's log, the JVM's own messages) to that file, so a run that loses its JVM can say why
(core/spark/jvm_failure.py). `current_jvm()` is the JVM this process launched, as PySpark keeps one
per process.
"""

from __future__ import annotations

import math
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from core.errors import ConfigError, JvmDiedError
from core.spark.class_archive import ClassArchive
from core.spark.java import check_java
from core.spark.python_launcher import launcher

#: Spark's own default state store (all state in maps on the JVM heap); enough for a plan that runs
#: nothing on transformWithState (lower.state_store_for).
HDFS_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
#: The store transformWithState requires (merge/spark/sliding_top_k.py), and every run's default here:
#: it keeps state off the JVM heap (native memory, spilled to local disk).
ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
STATE_STORES = {"rocksdb": ROCKSDB_STATE_STORE, "hdfs": HDFS_STATE_STORE}
PROVIDER_KEY = "spark.sql.streaming.stateStore.providerClass"
ROCKSDB_PREFIX = "spark.sql.streaming.stateStore.rocksdb."

#: The JIT stops at C1. Every micro-batch compiles new classes (the watermark is a literal in the
#: generated code), and C2 recompiling them took half the VM core's JVM time at 150,000 events/s;
#: with C1 alone a small Q5 epoch took 1.0 s instead of 1.6 s (ADR 0010).
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"
#: After the driver's first OutOfMemoryError, kill it if it is still alive OOM_KILL_AFTER_S later. A task
#: that runs out of heap takes the JVM down by itself (Spark's handler logs the stack, then exits with
#: 52); one in another thread (the listener bus, a heartbeater) can leave a JVM that never reports
#: progress again, and a run that waits for it would hang until its timeout. The delay leaves Spark the
#: time to log where the memory ran out; the check of the command line guards against a reused pid.
OOM_KILL_AFTER_S = 30
OOM_BACKSTOP = (
    f'"-XX:OnOutOfMemoryError=(sleep {OOM_KILL_AFTER_S} && grep -qa SparkSubmit /proc/%p/cmdline '
    '&& kill -9 %p) >/dev/null 2>&1 &"'
)

# ---- memory ---------------------------------------------------------------------------------------

#: Spark refuses a heap under 450 MiB (300 MiB reserved, times 1.5); 512 MiB is the least we start.
MIN_HEAP_MB = 512
MIN_ROCKSDB_MB = 64
#: The defaults, as shares of the machine's RAM (total) and of what is available when the run starts,
#: and caps: a heap beyond ~8 GiB only lengthens GC pauses for these queries, and RocksDB's shared cache
#: and write buffers beyond 2 GiB hold nothing a drill's state needs.
DRIVER_SHARE, DRIVER_AVAILABLE_SHARE, DRIVER_CAP_MB = 1 / 4, 1 / 2, 8192
EXECUTOR_SHARE, EXECUTOR_AVAILABLE_SHARE, EXECUTOR_CAP_MB = 1 / 8, 1 / 4, 8192
ROCKSDB_SHARE, ROCKSDB_AVAILABLE_SHARE, ROCKSDB_CAP_MB = 1 / 16, 1 / 8, 2048
SIZE_STEP_MB = 128  # defaults are rounded down to this

SIZING = (
    "driver: 1/4 of RAM, at most 1/2 of the memory available at start and 8g; executors: 1/8 of RAM, "
    "at most 1/4 of the available memory and 8g; RocksDB: 1/16 of RAM, at most 1/8 of the available "
    f"memory and 2g; heaps never below {MIN_HEAP_MB}m"
)

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([kmgt]?)(?:i?b)?", re.IGNORECASE)
_UNIT_MB = {"k": 1 / 1024, "": 1.0, "m": 1.0, "g": 1024.0, "t": 1024.0 * 1024.0}


def parse_size_mb(text: str, flag: str) -> int:
    """A memory size as Spark writes it ("512m", "4g", "1.5g"; a bare number is MiB) in MiB, or a
    ConfigError naming `flag`."""
    m = _SIZE.fullmatch(str(text).strip())
    mb = float(m.group(1)) * _UNIT_MB[m.group(2).lower()] if m else 0.0
    if not m or not math.isfinite(mb) or mb < 1:
        raise ConfigError(
            f"{flag} {text!r} is not a memory size", hint=f"use e.g. {flag} 512m or {flag} 4g (MiB, GiB)"
        )
    return int(mb)


def format_mb(mb: float) -> str:
    """MiB as Spark writes them: "6g" when whole GiB, else "1536m"."""
    mb = int(mb)
    return f"{mb // 1024}g" if mb % 1024 == 0 else f"{mb}m"


@dataclass(frozen=True)
class MachineMemory:
    """This machine's RAM in MiB: in all, and available (free plus reclaimable) when the run starts."""

    total_mb: int
    available_mb: int

    def __post_init__(self) -> None:
        if self.total_mb <= 0 or not 0 <= self.available_mb <= self.total_mb:
            raise ConfigError(
                f"impossible machine memory: {self.available_mb} of {self.total_mb} MiB available"
            )

    @classmethod
    def detect(cls) -> MachineMemory:
        """Read once, by the command line, and passed down."""
        import psutil

        vm = psutil.virtual_memory()
        return cls(total_mb=vm.total // 2**20, available_mb=vm.available // 2**20)

    def to_json(self) -> dict[str, str]:
        return {"total": format_mb(self.total_mb), "available": format_mb(self.available_mb)}


def _default_mb(machine: MachineMemory, share: float, available_share: float, cap: int, floor: int) -> int:
    mb = min(machine.total_mb * share, machine.available_mb * available_share, cap)
    return max(floor, int(mb) // SIZE_STEP_MB * SIZE_STEP_MB)


@dataclass(frozen=True)
class MemoryConfig:
    """The memory a run's JVMs get and where its state lives; MiB throughout.

    driver_mb: the driver's heap (spark.driver.memory); with a local[N] master every task runs in it.
    executor_mb: each executor's heap (spark.executor.memory) on a standalone cluster; None when the
    run has no executor JVMs of its own (local[N]). state_store: "rocksdb" (state off the heap,
    bounded by rocksdb_mb) or "hdfs" (Spark's HDFS-backed store: every key on the heap). rocksdb_mb:
    the memory all RocksDB stores of one JVM share (block cache and write buffers,
    boundedMemoryUsage); None leaves Spark's per-store defaults. The dataclass defaults are Spark's
    own heaps with the RocksDB store (tests, benches); `sized` gives a user's run its defaults from the
    machine. `machine` and `flags` only
    record where the values came from (summary.json).
    """

    driver_mb: int = 1024
    executor_mb: int | None = None
    state_store: str = "rocksdb"
    rocksdb_mb: int | None = None
    machine: MachineMemory | None = None
    flags: tuple[str, ...] = ()  # the settings a flag chose (the others are defaults)

    def __post_init__(self) -> None:
        if not isinstance(self.driver_mb, int) or self.driver_mb < MIN_HEAP_MB:
            raise ConfigError(
                f"--driver-memory {format_mb(self.driver_mb)} is too small for Spark",
                hint=f"give the driver at least {format_mb(MIN_HEAP_MB)} (Spark reserves 300m of its heap)",
            )
        if self.executor_mb is not None and self.executor_mb < MIN_HEAP_MB:
            raise ConfigError(
                f"--executor-memory {format_mb(self.executor_mb)} is too small for Spark",
                hint=f"give each executor at least {format_mb(MIN_HEAP_MB)}",
            )
        if self.state_store not in STATE_STORES:
            raise ConfigError(
                f"unknown state store {self.state_store!r}",
                hint=f"use --state-store {' or '.join(STATE_STORES)}",
            )
        if self.rocksdb_mb is not None and self.state_store != "rocksdb":
            raise ConfigError(
                "--rocksdb-memory sizes the RocksDB state store; --state-store hdfs keeps state on the heap",
                hint="drop --rocksdb-memory, or drop --state-store hdfs (RocksDB is the default)",
            )
        if self.rocksdb_mb is not None and self.rocksdb_mb < MIN_ROCKSDB_MB:
            raise ConfigError(
                f"--rocksdb-memory {format_mb(self.rocksdb_mb)} is too small",
                hint=f"give RocksDB at least {format_mb(MIN_ROCKSDB_MB)}",
            )

    @classmethod
    def sized(
        cls,
        machine: MachineMemory,
        *,
        driver_memory: str | None = None,
        executor_memory: str | None = None,
        state_store: str | None = None,
        rocksdb_memory: str | None = None,
        executors: int = 0,
        no_executors: str = "its tasks run in the driver JVM",
        executor_cap_mb: int | None = None,
    ) -> MemoryConfig:
        """The memory of a run with `executors` executor JVMs (0: local[N]) on `machine`: each flag given
        (a size such as "4g", or None for the default sized from the machine), checked against the
        machine's RAM. `no_executors` says why a run without executors has no use for --executor-memory;
        `executor_cap_mb` bounds the default executor heap (what each worker of the master offers).
        """
        flags = tuple(
            name
            for name, value in (
                ("driver_memory", driver_memory),
                ("executor_memory", executor_memory),
                ("state_store", state_store),
                ("rocksdb_memory", rocksdb_memory),
            )
            if value is not None
        )
        if executor_memory is not None and executors == 0:
            raise ConfigError(
                f"--executor-memory sizes executor JVMs, and this run has none: {no_executors}",
                hint="drop --executor-memory; --driver-memory sizes the driver's heap",
            )
        store = (state_store or "rocksdb").strip().lower()
        if store not in STATE_STORES:
            raise ConfigError(
                f"unknown state store {state_store!r}", hint=f"use --state-store {' or '.join(STATE_STORES)}"
            )
        driver = (
            parse_size_mb(driver_memory, "--driver-memory")
            if driver_memory is not None
            else _default_mb(machine, DRIVER_SHARE, DRIVER_AVAILABLE_SHARE, DRIVER_CAP_MB, MIN_HEAP_MB)
        )
        executor = None
        if executors:
            executor = (
                parse_size_mb(executor_memory, "--executor-memory")
                if executor_memory is not None
                else _default_mb(
                    machine,
                    EXECUTOR_SHARE,
                    EXECUTOR_AVAILABLE_SHARE,
                    min(EXECUTOR_CAP_MB, executor_cap_mb or EXECUTOR_CAP_MB),
                    MIN_HEAP_MB,
                )
            )
        rocksdb = None
        if rocksdb_memory is not None:
            rocksdb = parse_size_mb(rocksdb_memory, "--rocksdb-memory")
        elif store == "rocksdb":
            rocksdb = _default_mb(
                machine, ROCKSDB_SHARE, ROCKSDB_AVAILABLE_SHARE, ROCKSDB_CAP_MB, MIN_ROCKSDB_MB
            )
        config = cls(driver, executor, store, rocksdb, machine, flags)
        config.check_fits(executors)
        return config

    def check_fits(self, executors: int) -> None:
        """Refuse heaps and RocksDB memory that add up to more than the machine's RAM."""
        if self.machine is None:
            return
        jvms = max(executors, 0)
        need = self.driver_mb + jvms * (self.executor_mb or 0) + (jvms or 1) * (self.rocksdb_mb or 0)
        if need > self.machine.total_mb:
            parts = [f"--driver-memory {format_mb(self.driver_mb)}"]
            if jvms and self.executor_mb:
                parts.append(f"{jvms} x --executor-memory {format_mb(self.executor_mb)}")
            if self.rocksdb_mb:
                parts.append(f"{jvms or 1} x --rocksdb-memory {format_mb(self.rocksdb_mb)}")
            raise ConfigError(
                f"{' + '.join(parts)} = {format_mb(need)}, more than this machine's "
                f"{format_mb(self.machine.total_mb)} of RAM",
                hint="lower them (without the flags they are sized to fit: " + SIZING + ")",
            )

    @property
    def provider(self) -> str:
        return STATE_STORES[self.state_store]

    def state_store_conf(self) -> tuple[tuple[str, str], ...]:
        """The session settings of the state store: its provider and, for RocksDB, its bounded memory."""
        conf: list[tuple[str, str]] = [(PROVIDER_KEY, self.provider)]
        if self.state_store == "rocksdb" and self.rocksdb_mb is not None:
            conf += [
                (ROCKSDB_PREFIX + "boundedMemoryUsage", "true"),
                (ROCKSDB_PREFIX + "maxMemoryUsageMB", str(self.rocksdb_mb)),
            ]
        return tuple(conf)

    def spark_conf(self) -> tuple[tuple[str, str], ...]:
        conf = [("spark.driver.memory", f"{self.driver_mb}m")]
        if self.executor_mb is not None:
            conf.append(("spark.executor.memory", f"{self.executor_mb}m"))
        return (*conf, *self.state_store_conf())

    def to_json(self) -> dict[str, Any]:
        """What summary.json records: the sizes as Spark writes them, and where they came from."""
        return {
            "driver_memory": format_mb(self.driver_mb),
            "executor_memory": format_mb(self.executor_mb) if self.executor_mb is not None else None,
            "state_store": self.state_store,
            "rocksdb_memory": format_mb(self.rocksdb_mb) if self.rocksdb_mb is not None else None,
            "set_by_flags": list(self.flags),
            "machine": self.machine.to_json() if self.machine is not None else None,
        }

    def describe(self) -> str:
        """One line for a status: driver 6g, RocksDB state (1536m)."""
        parts = [f"driver {format_mb(self.driver_mb)}"]
        if self.executor_mb is not None:
            parts.append(f"executors {format_mb(self.executor_mb)}")
        store = "RocksDB state" if self.state_store == "rocksdb" else "HDFS-backed state (on the heap)"
        if self.rocksdb_mb is not None:
            store += f" ({format_mb(self.rocksdb_mb)})"
        return ", ".join([*parts, store])


_LOCAL = re.compile(r"local(\[.*\])?")
_LOCAL_CLUSTER = re.compile(r"local-cluster\[(\d+),(\d+),(\d+)\]")


def runs_in_driver(master: str) -> bool:
    """Whether every task of `master` runs in the driver's JVM (local, local[N], local[N,F])."""
    return _LOCAL.fullmatch(master.strip()) is not None


def worker_memory_mb(master: str) -> int | None:
    """The memory each worker of a local-cluster[N,C,MB] master offers (None for other masters)."""
    m = _LOCAL_CLUSTER.fullmatch(master.strip())
    return int(m.group(3)) if m else None


def executor_jvms(master: str) -> int:
    """Executor JVMs a run on `master` has on this machine: none under local[N], N under
    local-cluster[N,C,MB], one per standalone worker (counted as one: the cluster is not ours)."""
    m = _LOCAL_CLUSTER.fullmatch(master.strip())
    if m:
        return int(m.group(1))
    return 0 if runs_in_driver(master) else 1


@dataclass(frozen=True)
class SparkConfig:
    """How the VM side runs; `master` is a Spark master URL such as local[2] or local-cluster[2,1,1024].

    local[N,F] lets a failed task run F times in all, as on a cluster (plain local[N] fails the query at
    the first task failure). `memory` sizes the JVMs and picks the state store; `jvm_log`, when set,
    receives the JVM's stdout and stderr (else they are this process's).
    """

    master: str = "local[2,4]"
    shuffle_partitions: int = 2
    app_name: str = "sponge"
    conf: tuple[tuple[str, str], ...] = ()  # more Spark settings (name, value), e.g. spark.locality.wait
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    jvm_log: Path | None = None
    # The class archives the driver and executors map (core/spark/class_archive.py); None: none.
    class_archive: ClassArchive | None = field(default_factory=ClassArchive.installed)

    def __post_init__(self) -> None:
        if self.memory.executor_mb is not None and runs_in_driver(self.master):
            raise ConfigError(
                f"--executor-memory sizes executor JVMs, and --master {self.master} has none: every task "
                "runs in the driver JVM",
                hint="drop --executor-memory; --driver-memory sizes the driver's heap",
            )
        m = _LOCAL_CLUSTER.fullmatch(self.master.strip())
        if m and (self.memory.executor_mb or 1024) > int(m.group(3)):
            raise ConfigError(
                f"--master {self.master} gives each worker {m.group(3)} MB, less than an executor's "
                f"{format_mb(self.memory.executor_mb or 1024)}: no executor would start",
                hint="raise the master's MB or lower --executor-memory",
            )

    def options(self) -> tuple[tuple[str, str], ...]:
        """Every Spark setting the session is built with, in order (later ones win)."""
        log_config = Path(__file__).with_name("log4j2.properties")
        archive = self.class_archive
        driver_cds = archive.driver_options() if archive else ""
        executor_cds = archive.executor_options() if archive else ""
        return (
            ("spark.master", self.master),
            ("spark.app.name", self.app_name),
            (
                "spark.driver.extraJavaOptions",
                f"-Dlog4j.configurationFile={log_config} {JIT_OPTIONS} {OOM_BACKSTOP} {driver_cds}".rstrip(),
            ),
            ("spark.executor.extraJavaOptions", f"{JIT_OPTIONS} {executor_cds}".rstrip()),
            ("spark.sql.shuffle.partitions", str(self.shuffle_partitions)),
            ("spark.ui.enabled", "false"),
            ("spark.ui.showConsoleProgress", "false"),
            ("spark.sql.session.timeZone", "UTC"),
            ("spark.driver.bindAddress", "127.0.0.1"),
            ("spark.sql.execution.arrow.pyspark.enabled", "true"),
            # Readers outside Spark (pyarrow, DuckDB) see UTC microsecond timestamps, not legacy INT96.
            ("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS"),
            # A RocksDB store commits a changelog per epoch instead of a snapshot.
            ("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true"),
            *self.memory.spark_conf(),
            *self.conf,
        )


@dataclass(frozen=True)
class Jvm:
    """The Spark JVM this process launched: its process (None when PySpark attached to a running one),
    where its output goes (None: this process's stderr), and what it was started with."""

    proc: subprocess.Popen[bytes] | None
    log: Path | None
    master: str
    memory: MemoryConfig

    def exit_code(self) -> int | None:
        """None while the JVM runs (or cannot be watched), else how it ended (-9: SIGKILL)."""
        return self.proc.poll() if self.proc is not None else None


_jvm: dict[str, Jvm] = {}  # "current": the JVM of this process (PySpark keeps one per process)


def current_jvm() -> Jvm | None:
    """The JVM this process launched through spark_session, if any."""
    return _jvm.get("current")


def spark_session(config: SparkConfig = SparkConfig()):
    """This process's SparkSession, built with `config` (a JVM started earlier keeps its own heap and
    output; `current_jvm()` says what it was started with)."""
    check_java()
    # Python workers must run the interpreter that has the project installed (core/spark/python_launcher.py).
    os.environ.setdefault("PYSPARK_PYTHON", launcher())
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark import SparkConf, SparkContext
    from pyspark.sql import SparkSession

    from core.spark.source import register

    options = config.options()
    launching = SparkContext._gateway is None  # PySpark reuses a JVM it started, even after a stop
    with _own_sigint():
        if launching and config.jvm_log is not None:
            conf = SparkConf(loadDefaults=False)
            for key, value in options:
                conf.set(key, value)
            SparkContext(conf=conf, gateway=_launch(conf, config))
        builder = SparkSession.builder
        for key, value in options:
            builder = builder.config(key, value)
        spark = builder.getOrCreate()
    if launching:
        _jvm["current"] = Jvm(spark.sparkContext._gateway.proc, config.jvm_log, config.master, config.memory)
        _quiet_accumulator_server(spark.sparkContext)
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


@contextmanager
def _own_sigint() -> Iterator[None]:
    """Keep the caller's SIGINT handler: a SparkContext installs its own, which cancels every job and
    raises KeyboardInterrupt, so Ctrl-C would kill a run that `sponge run` stops once its epoch in
    flight commits (core/cli/run.py `stopping_on_signals`)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread handles signals, and only it may set their handlers
        return
    previous = signal.getsignal(signal.SIGINT)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def _launch(conf: Any, config: SparkConfig) -> Any:
    """Start the JVM with its stdout and stderr in `config.jvm_log`; a JVM that does not come up is
    reported with the last line of its log."""
    from pyspark.errors import PySparkRuntimeError
    from pyspark.java_gateway import launch_gateway

    assert config.jvm_log is not None
    config.jvm_log.parent.mkdir(parents=True, exist_ok=True)
    with open(config.jvm_log, "wb") as log:  # this JVM's log alone
        try:
            return launch_gateway(conf, popen_kwargs={"stdout": log, "stderr": log})
        except PySparkRuntimeError as e:
            raise did_not_start(config) from e


def did_not_start(config: SparkConfig) -> JvmDiedError:
    """The error for a JVM that exited before it answered: its log's last line says why (a heap the
    machine cannot reserve, a bad JVM option, ...)."""
    log = config.jvm_log
    text = log.read_text(errors="replace") if log is not None and log.exists() else ""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and "incubator modules" not in ln]
    where = f"the JVM's log: {log}" if log is not None else "its output went to this process's stderr"
    return JvmDiedError(
        f"Spark's JVM did not start: {lines[-1] if lines else 'it exited before it answered'}",
        hint=f"check --driver-memory (now {format_mb(config.memory.driver_mb)}) and Java; {where}",
    )


def _quiet_accumulator_server(sc: Any) -> None:
    """PySpark's accumulator server prints a traceback when the JVM's connection to it breaks, which is
    how a dying JVM looks from here; the run reports that death itself (core/spark/jvm_failure.py)."""
    server = getattr(sc, "_accumulatorServer", None)
    if server is None:
        return
    report = server.handle_error

    def handle_error(request: Any, client_address: Any) -> None:
        if not isinstance(sys.exc_info()[1], (EOFError, ConnectionError)):
            report(request, client_address)

    server.handle_error = handle_error


def stop_active_session() -> None:
    """Stop this process's active Spark session, if any (a drill run ends its own); a JVM that died
    has nothing left to stop (and would only answer with py4j's refused connection)."""
    from pyspark.sql import SparkSession

    jvm = current_jvm()
    if jvm is not None and jvm.exit_code() is not None:
        return
    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()

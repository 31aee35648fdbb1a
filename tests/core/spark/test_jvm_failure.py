"""A dead JVM is reported as what it is: the cause read from its log (with the stateful operator when the
stack shows it), the memory in force and the flag that changes it. Fast: the "JVMs" here are log files
and short-lived Python processes standing in for the driver's process."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from core.errors import JvmDiedError
from core.spark import jvm_failure
from core.spark.jvm_failure import JvmWatch, executor_died, find_cause, jvm_died, read_log
from core.spark.session import Jvm, MachineMemory, MemoryConfig, SparkConfig, did_not_start

LOGS = Path(__file__).with_name("jvm_logs")  # excerpts of real JVM logs (the join's is from a run here)

# From a real run (q3's join on the HDFS-backed store, --driver-memory 512m), shortened.
JOIN_OOM = (LOGS / "join_oom.log").read_text()

# Modeled on the report: a streaming aggregate's state on the heap (StateStoreSaveExec).
AGGREGATE_OOM = (LOGS / "aggregate_oom.log").read_text()

# From a real run: one Arrow batch larger than the direct memory (bounded by the heap's size).
DIRECT_OOM = (LOGS / "direct_oom.log").read_text()

MACHINE = MachineMemory(total_mb=24 * 1024, available_mb=20 * 1024)


def a_jvm(tmp_path: Path, log: str | None, *, driver_mb: int = 512, store: str = "hdfs", proc=None) -> Jvm:
    path = None
    if log is not None:
        path = tmp_path / "jvm.log"
        path.write_text(log)
    rocksdb = 1024 if store == "rocksdb" else None
    memory = MemoryConfig(driver_mb=driver_mb, state_store=store, rocksdb_mb=rocksdb, machine=MACHINE)
    return Jvm(proc=proc, log=path, master="local[2,4]", memory=memory)


def test_the_cause_and_the_stateful_operator_are_read_from_the_log() -> None:
    join = find_cause(JOIN_OOM)
    assert join.oom == "java.lang.OutOfMemoryError: Java heap space"
    assert join.operator == "StreamingSymmetricHashJoinExec"
    aggregate = find_cause(AGGREGATE_OOM)
    assert (aggregate.oom, aggregate.operator) == (
        "java.lang.OutOfMemoryError: Java heap space",
        "StateStoreSaveExec",
    )
    direct = find_cause(DIRECT_OOM)
    assert direct.oom is not None and direct.oom.startswith("io.netty.util.internal.OutOfDirectMemoryError")
    assert direct.operator is None


def test_a_log_without_an_out_of_memory_error_gives_its_last_error() -> None:
    cause = find_cause("01:00:00 ERROR A: first\nboom\n01:00:01 ERROR B: the last one\n")
    assert cause.oom is None and cause.operator is None and cause.last_error == "B: the last one"
    assert find_cause("") == jvm_failure.Cause()


def test_a_heap_death_names_cause_operator_memory_in_force_and_the_flag(tmp_path: Path) -> None:
    jvm = a_jvm(tmp_path, JOIN_OOM)
    e = jvm_died(jvm, exit_code=52)
    assert isinstance(e, JvmDiedError)
    assert e.message.startswith(
        "Spark's JVM died of java.lang.OutOfMemoryError: Java heap space in StreamingSymmetricHashJoinExec"
    )
    assert "--driver-memory 512m in force" in e.message and "local[2,4]" in e.message
    assert "--state-store hdfs" in e.message
    assert "e.g. --driver-memory 1g" in e.hint and "24.0 GiB of RAM" in e.hint
    assert "drop --state-store hdfs" in e.hint and str(jvm.log) in e.hint


def test_with_rocksdb_the_hint_only_raises_the_heap(tmp_path: Path) -> None:
    e = jvm_died(a_jvm(tmp_path, AGGREGATE_OOM, driver_mb=6144, store="rocksdb"), exit_code=52)
    assert "in StateStoreSaveExec" in e.message and "--driver-memory 6g in force" in e.message
    assert "--rocksdb-memory 1g" in e.message
    assert "e.g. --driver-memory 12g" in e.hint and "--state-store" not in e.hint


def test_spark_s_out_of_memory_exit_without_a_log_still_says_so(tmp_path: Path) -> None:
    e = jvm_died(a_jvm(tmp_path, None), exit_code=52)
    assert "exit code 52" in e.message and "--driver-memory 512m" in e.message
    assert "this process's stderr" in e.hint


def test_a_kill_points_at_the_machine_s_memory(tmp_path: Path) -> None:
    e = jvm_died(a_jvm(tmp_path, "01:00:00 WARN X: nothing\n", store="rocksdb"), exit_code=-9)
    assert "killed (SIGKILL)" in e.message and "out-of-memory killer" in e.message
    assert "--driver-memory 512m" in e.message and "--rocksdb-memory 1g" in e.message
    assert "lower --driver-memory or --rocksdb-memory" in e.hint and "dmesg" in e.hint


def test_another_death_gives_the_exit_code_and_the_last_error(tmp_path: Path) -> None:
    e = jvm_died(a_jvm(tmp_path, "01:00:00 ERROR SparkContext: it broke\n"), exit_code=1)
    assert e.message == "Spark's JVM exited unexpectedly with code 1: SparkContext: it broke"
    assert "jvm.log" in e.hint


def test_a_jvm_that_did_not_start_says_so(tmp_path: Path) -> None:
    log = tmp_path / "jvm.log"
    log.write_text(
        "WARNING: Using incubator modules: jdk.incubator.vector\n"
        "Error occurred during initialization of VM\nInvalid maximum heap size: -Xmx99999999g\n"
    )
    e = did_not_start(SparkConfig(memory=MemoryConfig(driver_mb=2048), jvm_log=log))
    assert e.message == "Spark's JVM did not start: Invalid maximum heap size: -Xmx99999999g"
    assert "--driver-memory (now 2g)" in e.hint and str(log) in e.hint


def test_an_executor_that_ran_out_of_memory_names_the_executor_flag() -> None:
    failure = (
        "Job aborted due to stage failure: Task 0 in stage 3.0 failed 4 times, most recent failure: "
        "Lost task 0.3 (executor 1): ExecutorLostFailure (executor 1 exited caused by one of the running "
        "tasks) Reason: Command exited with code 52"
    )
    memory = MemoryConfig(driver_mb=2048, executor_mb=3072)
    e = executor_died(memory, failure)
    assert e is not None and "a Spark executor died" in e.message
    assert "--executor-memory 3g in force" in e.message and "e.g. --executor-memory 6g" in e.hint
    assert executor_died(MemoryConfig(), failure) is None  # local[N]: no executors of its own
    assert executor_died(memory, "AnalysisException: no such column") is None


def _process(code: int) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-c", f"import sys; sys.exit({code})"])
    proc.wait(30)
    return proc


def test_a_watch_raises_the_death_it_sees(tmp_path: Path) -> None:
    jvm = a_jvm(tmp_path, "", proc=_process(52))
    watch = JvmWatch(jvm=jvm)
    jvm.log.write_text(AGGREGATE_OOM)  # type: ignore[union-attr] - logged while the run went on
    assert watch.died()
    with pytest.raises(
        JvmDiedError, match=r"died of java\.lang\.OutOfMemoryError: Java heap space in StateStoreSaveExec"
    ):
        watch.check()


def test_a_watch_reads_only_what_its_run_logged(tmp_path: Path) -> None:
    """A JVM shared by several runs (a drill's warm-up, then its trace): an OutOfMemoryError logged
    before this run began is not this run's failure."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        jvm = a_jvm(tmp_path, AGGREGATE_OOM, proc=proc)
        watch = JvmWatch(jvm=jvm)
        assert not watch.died()
        started = time.monotonic()
        assert watch.error("org.apache.spark.sql.AnalysisException: bad column", wait_s=20) is None
        assert time.monotonic() - started < 5  # an ordinary failure: no dying JVM to wait for
        with jvm.log.open("a") as log:  # type: ignore[union-attr]
            log.write(JOIN_OOM)
        e = watch.error("Job cancelled because SparkContext was shut down")
        assert e is not None and "ran out of memory: java.lang.OutOfMemoryError" in e.message
        assert "StreamingSymmetricHashJoinExec" in e.message
    finally:
        proc.kill()
        proc.wait(30)


def test_reporting_turns_py4j_s_refused_connection_into_the_jvm_s_death(tmp_path: Path) -> None:
    jvm = a_jvm(tmp_path, "", proc=_process(52))
    watch = JvmWatch(jvm=jvm)
    jvm.log.write_text(JOIN_OOM)  # type: ignore[union-attr]
    with pytest.raises(JvmDiedError) as e, watch.reporting():
        raise ConnectionRefusedError(111, "Connection refused")
    assert isinstance(e.value.__cause__, ConnectionRefusedError)
    assert "Traceback" not in e.value.one_line() and "Connection refused" not in e.value.one_line()


def test_reporting_leaves_other_failures_alone(tmp_path: Path) -> None:
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        watch = JvmWatch(jvm=a_jvm(tmp_path, "", proc=proc))
        with pytest.raises(ValueError, match="a bug"), watch.reporting():
            raise ValueError("a bug")
    finally:
        proc.kill()
        proc.wait(30)


def test_a_long_log_is_read_by_its_head_and_tail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(jvm_failure, "LOG_HEAD", 10)
    monkeypatch.setattr(jvm_failure, "LOG_TAIL", 10)
    path = tmp_path / "jvm.log"
    path.write_text("HEAD567890" + "x" * 100 + "0987654TAIL")
    assert read_log(path) == "HEAD567890\n...\n987654TAIL"
    assert read_log(path, start=105) == "xxxxx0987654TAIL"
    assert read_log(tmp_path / "missing.log") == "" and read_log(None) == ""

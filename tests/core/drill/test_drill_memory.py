"""A drill's configuration is refused before its first probe when it cannot work, every run it starts
gets the drill's memory, and a run whose JVM died reaches the user as the error the run reported.
Fast: no Spark; the one child process here fails before it would start one."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from core.drill import drill
from core.drill.drill import DrillConfig, _child_failure, _run_child, _spec
from core.drill.run_policy import ERROR_FILE, PolicyRun
from core.errors import ConfigError, JvmDiedError, SpongeError
from core.nexmark.patterns import BurstPattern
from core.spark.session import MachineMemory, MemoryConfig

MACHINE = MachineMemory(total_mb=24 * 1024, available_mb=22 * 1024)
TWO_CORES = len(os.sched_getaffinity(0)) >= 2 and (os.cpu_count() or 1) >= 2
needs_two_cores = pytest.mark.skipif(not TWO_CORES, reason="a drill pins the VMs and workers to two cores")


def config(**kw) -> DrillConfig:
    kw.setdefault("policies", ("noscaling",))
    return DrillConfig(**kw)


@pytest.mark.parametrize(
    ("pattern", "lead", "duration"),
    [
        ("sudden:2x:30s", 30, 60),  # the burst ends with the trace: no time to recover
        ("sudden:2x:30s", 30, 59),
        ("gradual:3x:40s", 10, 50),
        ("sine:2x:20s", 30, 50),
        ("sine:2x:20s", 100, 90),  # the lead-in alone is longer than the trace
    ],
)
def test_a_trace_without_stable_time_after_its_burst_is_refused(
    pattern: str, lead: float, duration: float
) -> None:
    with pytest.raises(ConfigError) as e:
        config(pattern=pattern, lead_s=lead, duration_s=duration)
    burst = BurstPattern.parse(pattern).length_s
    assert f"does not fit in {duration:g} s" in e.value.message
    assert f"--duration above {lead + burst:g} s" in e.value.hint and "--lead" in e.value.hint


def test_a_trace_with_stable_time_after_its_burst_is_accepted() -> None:
    config(pattern="sudden:2x:30s", lead_s=30, duration_s=61)
    config(pattern="sudden:2x:6s", lead_s=5, duration_s=13)  # make drill's


@needs_two_cores
def test_executor_memory_is_checked_against_the_machine_for_every_policy() -> None:
    """Every policy runs on standalone VMs: the base VM's executor and one a policy may add."""
    config(policies=("sponge",), memory=MemoryConfig(driver_mb=2048, executor_mb=2048, machine=MACHINE))
    too_much = MemoryConfig(driver_mb=8192, executor_mb=9216, machine=MACHINE)
    with pytest.raises(ConfigError, match="2 x --executor-memory 9g"):
        config(policies=("sponge", "noscaling"), memory=too_much)


def test_hdfs_state_is_refused_for_a_transform_with_state_query() -> None:
    hdfs = MemoryConfig(state_store="hdfs")
    with pytest.raises(ConfigError) as e:
        config(query="q5", memory=hdfs)
    assert "transformWithState" in e.value.message and "RocksDB" in e.value.message
    assert e.value.hint == "drop --state-store hdfs (RocksDB is the default)"
    config(query="q1", memory=hdfs)  # stateless: any store


@needs_two_cores
def test_every_run_gets_the_drill_s_memory_and_its_vms_the_executor_memory() -> None:
    cfg = config(policies=("vmbase", "noscaling"), memory=MemoryConfig(driver_mb=2048, executor_mb=3072))
    trace = BurstPattern.parse(cfg.pattern).trace(1000.0, cfg.duration_s, cfg.lead_s)
    vm = _spec(cfg, "vmbase", trace, 1000.0, routed=False)
    plain = _spec(cfg, "noscaling", trace, 1000.0, routed=False)
    assert (vm.memory.driver_mb, vm.memory.executor_mb) == (2048, 3072)
    assert (plain.memory.driver_mb, plain.memory.executor_mb) == (2048, 3072)
    spark = drill_spark_config(vm, "spark://127.0.0.1:7077")
    assert dict(spark.options())["spark.executor.memory"] == "3072m"
    assert spark.jvm_log == Path(vm.output).parent / "jvm.log"
    assert drill_spark_config(replace(vm, jvm_log="/x/probe-offload/jvm.log"), None).jvm_log == Path(
        "/x/probe-offload/jvm.log"
    )
    # spec.json carries it to the child
    assert PolicyRun(**json.loads(json.dumps(asdict(vm)))).memory == vm.memory
    unset = config(policies=("vminit",))
    assert _spec(unset, "vminit", trace, 1000.0, routed=False).memory.executor_mb == 1024  # Spark's own


def drill_spark_config(spec: PolicyRun, url: str):
    from core.drill.run_policy import _spark_config

    return _spark_config(spec, url)


def test_a_probe_measured_with_other_memory_is_not_reused() -> None:
    """The epochs' cost depends on the heap (GC) and on where state lives."""
    base = config(memory=MemoryConfig(driver_mb=2048, rocksdb_mb=512))
    key = drill.calibration_key(base)
    assert key["memory"] == {
        "driver_memory": "2g",
        "executor_memory": None,
        "state_store": "rocksdb",
        "rocksdb_memory": "512m",
    }
    for other in (
        MemoryConfig(driver_mb=4096, rocksdb_mb=512),
        MemoryConfig(driver_mb=2048, rocksdb_mb=1024),
        MemoryConfig(driver_mb=2048, state_store="hdfs"),
        MemoryConfig(driver_mb=2048, executor_mb=2048, rocksdb_mb=512),
    ):
        assert drill.calibration_key(replace(base, query="q1", memory=other))["memory"] != key["memory"]


def _spec_for(tmp_path: Path, policy: str = "probe", query: str = "q5") -> PolicyRun:
    return PolicyRun(
        policy=policy,
        query=query,
        events=1000,
        seed=0,
        schedule="10:1000",
        output=str(tmp_path / policy / "output"),
        master="local[2,4]",
        vm_cpus=[0],
        memory=MemoryConfig(driver_mb=1024),
    )


def test_the_error_a_run_reported_reaches_the_user_as_it_was(tmp_path: Path) -> None:
    spec = _spec_for(tmp_path)
    died = JvmDiedError(
        "Spark's JVM died of java.lang.OutOfMemoryError: Java heap space in StateStoreSaveExec",
        hint="raise it, e.g. --driver-memory 2g; the JVM's log: x/jvm.log",
    )
    (tmp_path / ERROR_FILE).write_text(
        json.dumps({"kind": type(died).__name__, "message": died.message, "hint": died.hint})
    )
    e = _child_failure(spec, 2, tmp_path)
    assert isinstance(e, JvmDiedError)
    assert e.message == f"the calibration probe failed: {died.message}" and e.hint == died.hint


def test_a_run_that_died_silently_is_read_from_its_jvm_log(tmp_path: Path) -> None:
    (tmp_path / "jvm.log").write_text("#\n# java.lang.OutOfMemoryError: Java heap space\n")
    (tmp_path / "run.log").write_text(
        "Traceback (most recent call last):\nConnectionRefusedError: [Errno 111]\n"
    )
    e = _child_failure(replace(_spec_for(tmp_path), policy="sponge"), -9, tmp_path)
    assert isinstance(e, JvmDiedError)
    assert (
        "the sponge run failed (exit -9): its JVM ran out of memory: java.lang.OutOfMemoryError" in e.message
    )
    assert "--driver-memory (now 1g)" in e.hint


def test_a_run_that_failed_otherwise_shows_its_log_s_tail(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("line\n" * 10 + "RuntimeError: boom\n")
    e = _child_failure(_spec_for(tmp_path), 1, tmp_path)
    assert type(e) is SpongeError and e.message.endswith("RuntimeError: boom")
    assert "run.log" in e.hint


def test_a_child_s_error_travels_through_its_process(tmp_path: Path) -> None:
    """The real child process (`python -m core.drill.run_policy`), failing before it starts Spark: its
    error comes back whole, with no traceback."""
    spec = _spec_for(tmp_path, query="q42")
    with pytest.raises(ConfigError) as e:
        _run_child(spec, tmp_path / "probe", status=lambda _: None)
    assert e.value.message == "the calibration probe failed: unknown query 'q42'"
    assert "sponge queries" in e.value.hint and "Traceback" not in e.value.one_line()

"""A drill's configuration is refused before its first probe when it cannot work, every run it starts
gets the drill's memory. Fast: no Spark."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, replace
from pathlib import Path

import pytest

from core.drill import drill
from core.drill.drill import DrillConfig, _spec
from core.drill.run_policy import PolicyRun
from core.errors import ConfigError
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

"""The run's memory as configuration: sizes parsed and validated, defaults sized from the machine (given
here as a parameter, never read from this one), refusals with a hint, the Spark settings it becomes.
Fast: nothing here starts Spark."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from core.spark.session import (
    HDFS_STATE_STORE,
    MIN_HEAP_MB,
    ROCKSDB_STATE_STORE,
    MachineMemory,
    MemoryConfig,
    SparkConfig,
    executor_jvms,
    format_mb,
    parse_size_mb,
    runs_in_driver,
    worker_memory_mb,
)

GIB = 1024
BIG = MachineMemory(total_mb=24 * GIB, available_mb=22 * GIB)  # the fresh 2-core 24 GiB machine


@pytest.mark.parametrize(
    ("text", "mb"),
    [
        ("512m", 512),
        ("512M", 512),
        ("4g", 4096),
        ("4G", 4096),
        ("1.5g", 1536),
        ("2048", 2048),
        ("6gb", 6144),
        ("1536MiB", 1536),
        (" 3g ", 3072),
        ("1t", 1024 * 1024),
        ("4096k", 4),
    ],
)
def test_sizes_are_read_as_spark_writes_them(text: str, mb: int) -> None:
    assert parse_size_mb(text, "--driver-memory") == mb


@pytest.mark.parametrize("text", ["lots", "", "-1g", "0", "0m", "4x", "g", "1.2.3g", "nan", "inf", "512 m b"])
def test_a_bad_size_is_refused_naming_the_flag(text: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_size_mb(text, "--executor-memory")
    assert "--executor-memory" in e.value.message and "not a memory size" in e.value.message
    assert "--executor-memory 4g" in e.value.hint


def test_sizes_are_written_as_spark_reads_them() -> None:
    assert [format_mb(m) for m in (512, 1024, 1536, 6144)] == ["512m", "1g", "1536m", "6g"]


def test_defaults_are_sized_from_the_machine() -> None:
    m = MemoryConfig.sized(BIG)
    assert m.driver_mb == 6 * GIB  # a quarter of the RAM
    assert m.executor_mb is None  # local[N]: no executor JVMs
    assert m.state_store == "rocksdb" and m.rocksdb_mb == 1536  # a sixteenth
    assert m.machine == BIG and m.flags == ()
    with_vms = MemoryConfig.sized(BIG, executors=2)
    assert with_vms.executor_mb == 3 * GIB  # an eighth


def test_defaults_are_capped_on_a_big_machine() -> None:
    m = MemoryConfig.sized(MachineMemory(total_mb=256 * GIB, available_mb=250 * GIB), executors=2)
    assert (m.driver_mb, m.executor_mb, m.rocksdb_mb) == (8 * GIB, 8 * GIB, 2 * GIB)


def test_defaults_never_take_more_than_is_available() -> None:
    busy = MachineMemory(total_mb=24 * GIB, available_mb=4 * GIB)
    m = MemoryConfig.sized(busy, executors=1)
    assert m.driver_mb <= busy.available_mb / 2 and m.driver_mb == 2 * GIB
    assert m.executor_mb == 1 * GIB and m.rocksdb_mb == 512
    assert m.driver_mb + m.executor_mb + m.rocksdb_mb <= busy.available_mb


def test_defaults_keep_spark_s_least_heap_on_a_small_machine() -> None:
    m = MemoryConfig.sized(MachineMemory(total_mb=1500, available_mb=900), executors=1)
    assert m.driver_mb == MIN_HEAP_MB and m.executor_mb == MIN_HEAP_MB


def test_flags_override_the_defaults_and_are_recorded() -> None:
    m = MemoryConfig.sized(BIG, driver_memory="2g", rocksdb_memory="256m")
    assert (m.driver_mb, m.rocksdb_mb) == (2048, 256)
    assert m.flags == ("driver_memory", "rocksdb_memory")
    hdfs = MemoryConfig.sized(BIG, state_store="HDFS")
    assert hdfs.state_store == "hdfs" and hdfs.rocksdb_mb is None and hdfs.provider == HDFS_STATE_STORE


@pytest.mark.parametrize(
    ("flags", "needles"),
    [
        ({"driver_memory": "256m"}, ("--driver-memory 256m is too small", "512m")),
        ({"driver_memory": "a lot"}, ("--driver-memory 'a lot' is not a memory size",)),
        ({"executor_memory": "100m", "executors": 1}, ("--executor-memory 100m is too small",)),
        ({"executor_memory": "2g"}, ("sizes executor JVMs", "drop --executor-memory")),
        ({"state_store": "memory"}, ("unknown state store 'memory'", "rocksdb or hdfs")),
        ({"state_store": "hdfs", "rocksdb_memory": "1g"}, ("--rocksdb-memory", "drop --rocksdb-memory")),
        ({"rocksdb_memory": "10m"}, ("--rocksdb-memory 10m is too small",)),
        ({"driver_memory": "30g"}, ("--driver-memory 30g", "more than this machine's 24g of RAM", "lower")),
        (
            {"driver_memory": "8g", "executor_memory": "8g", "executors": 2},
            ("2 x --executor-memory 8g", "more than this machine's 24g"),
        ),
    ],
)
def test_impossible_memory_is_refused_with_a_hint(flags: dict, needles: tuple[str, ...]) -> None:
    with pytest.raises(ConfigError) as e:
        MemoryConfig.sized(BIG, **flags)
    text = e.value.one_line()
    assert e.value.hint
    for needle in needles:
        assert needle in text, text


def test_the_settings_spark_is_started_with() -> None:
    m = MemoryConfig.sized(BIG, driver_memory="4g", executor_memory="2g", executors=1)
    conf = dict(m.spark_conf())
    assert conf["spark.driver.memory"] == "4096m" and conf["spark.executor.memory"] == "2048m"
    assert conf["spark.sql.streaming.stateStore.providerClass"] == ROCKSDB_STATE_STORE
    assert conf["spark.sql.streaming.stateStore.rocksdb.boundedMemoryUsage"] == "true"
    assert conf["spark.sql.streaming.stateStore.rocksdb.maxMemoryUsageMB"] == "1536"
    hdfs = dict(MemoryConfig.sized(BIG, state_store="hdfs").spark_conf())
    assert hdfs["spark.sql.streaming.stateStore.providerClass"] == HDFS_STATE_STORE
    assert not any("rocksdb.bounded" in k for k in hdfs)
    assert "spark.executor.memory" not in hdfs


def test_summary_json_s_record() -> None:
    recorded = MemoryConfig.sized(BIG, driver_memory="5g", executors=2).to_json()
    assert recorded == {
        "driver_memory": "5g",
        "executor_memory": "3g",
        "state_store": "rocksdb",
        "rocksdb_memory": "1536m",
        "set_by_flags": ["driver_memory"],
        "machine": {"total": "24g", "available": "22g"},
    }


def test_masters_say_where_tasks_run() -> None:
    assert runs_in_driver("local") and runs_in_driver("local[2]") and runs_in_driver("local[2,4]")
    assert runs_in_driver("local[*]")
    assert not runs_in_driver("local-cluster[2,1,1024]") and not runs_in_driver("spark://h:7077")
    assert [executor_jvms(m) for m in ("local[2,4]", "local-cluster[3,1,1024]", "spark://h:1")] == [0, 3, 1]


def test_the_default_executor_fits_a_local_cluster_s_workers() -> None:
    m = MemoryConfig.sized(BIG, executors=2, executor_cap_mb=worker_memory_mb("local-cluster[2,1,1024]"))
    assert m.executor_mb == 1024
    SparkConfig(master="local-cluster[2,1,1024]", memory=m)  # accepted as it is
    assert worker_memory_mb("local[2]") is None


def test_spark_config_refuses_executor_memory_that_cannot_apply() -> None:
    with pytest.raises(ConfigError, match="every task runs in the driver JVM"):
        SparkConfig(master="local[2,4]", memory=MemoryConfig(executor_mb=2048))
    with pytest.raises(ConfigError, match="less than an executor's 2g") as e:
        SparkConfig(master="local-cluster[2,1,1024]", memory=MemoryConfig(executor_mb=2048))
    assert "--executor-memory" in e.value.hint
    SparkConfig(master="local-cluster[2,1,1024]", memory=MemoryConfig(executor_mb=1024))  # fits


def test_the_driver_s_options_carry_memory_and_the_out_of_memory_backstop() -> None:
    options = SparkConfig(memory=MemoryConfig(driver_mb=2048), jvm_log=Path("x/jvm.log")).options()
    conf = dict(options)
    assert conf["spark.driver.memory"] == "2048m"
    java = conf["spark.driver.extraJavaOptions"]
    # one quoted option, so Spark's launcher keeps the command whole; no ';' (the JVM splits commands on it)
    assert '"-XX:OnOutOfMemoryError=(sleep ' in java and "kill -9 %p" in java
    assert ";" not in java.split("OnOutOfMemoryError=", 1)[1]
    extra = SparkConfig(conf=(("spark.driver.memory", "3g"),)).options()
    assert dict(extra)["spark.driver.memory"] == "3g"  # an explicit setting still wins (it comes last)

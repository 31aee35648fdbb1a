"""Build the local SparkSession the runs, tests and benches share, after checking Java is usable."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from core.errors import MissingDependencyError

MIN_JAVA = 17

#: Spark's default state store, which every query uses unless it needs another.
DEFAULT_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.HDFSBackedStateStoreProvider"
#: The store transformWithState requires (merge/spark/sliding_top_k.py).
ROCKSDB_STATE_STORE = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"

#: The JIT stops at C1. Every micro-batch compiles new classes (the watermark is a literal in the
#: generated code), and C2 recompiling them took half the VM core's JVM time at 150,000 events/s;
#: with C1 alone a small Q5 epoch took 1.0 s instead of 1.6 s (ADR 0010).
JIT_OPTIONS = "-XX:TieredStopAtLevel=1"


@dataclass(frozen=True)
class SparkConfig:
    """How the VM side runs; `master` is a Spark master URL such as local[2] or local-cluster[2,1,1024].

    local[N,F] lets a failed task run F times in all, as on a cluster (plain local[N] fails the query at
    the first task failure).
    """

    master: str = "local[2,4]"
    shuffle_partitions: int = 2
    app_name: str = "sponge"
    conf: tuple[tuple[str, str], ...] = ()  # more Spark settings (name, value), e.g. spark.locality.wait


def check_java() -> str:
    """Return the Java version string, or fail with a message that says how to install Java."""
    java = shutil.which(
        "java",
        path=os.path.join(os.environ.get("JAVA_HOME", ""), "bin") + os.pathsep + os.environ.get("PATH", ""),
    )
    hint = "install a JDK 17 or newer (Debian: apt-get install openjdk-17-jre-headless) or set JAVA_HOME"
    if java is None:
        raise MissingDependencyError("Java was not found; Spark needs it", hint=hint)
    out = subprocess.run([java, "-version"], capture_output=True, text=True, check=False).stderr
    m = re.search(r'version "(\d+)', out)
    if not m or int(m.group(1)) < MIN_JAVA:
        raise MissingDependencyError(
            f"Spark needs Java {MIN_JAVA}+, found: {out.splitlines()[:1]}", hint=hint
        )
    return m.group(1)


def spark_session(config: SparkConfig = SparkConfig()):
    check_java()
    # Python workers must run the interpreter that has the project installed.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    from pyspark.sql import SparkSession

    from core.spark.source import register

    log_config = Path(__file__).with_name("log4j2.properties")
    builder = (
        SparkSession.builder.master(config.master)
        .config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={log_config} {JIT_OPTIONS}")
        .config("spark.executor.extraJavaOptions", JIT_OPTIONS)
        .appName(config.app_name)
        .config("spark.sql.shuffle.partitions", str(config.shuffle_partitions))
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.execution.arrow.pyspark.enabled", "true")
        # Readers outside Spark (pyarrow, DuckDB) see UTC microsecond timestamps, not legacy INT96.
        .config("spark.sql.parquet.outputTimestampType", "TIMESTAMP_MICROS")
        # A RocksDB store commits a changelog per epoch instead of a snapshot (sliding_top_k's queries).
        .config("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    )
    for key, value in config.conf:
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark


def stop_active_session() -> None:
    """Stop this process's active Spark session, if any (a drill run ends its own)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()

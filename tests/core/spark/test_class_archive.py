"""Spark's class archives: offered only while they match this pyspark and Java, passed to every JVM
kind, and mapped by the JVMs `make setup` leaves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from core.spark.class_archive import ClassArchive, current_key
from core.spark.cluster import StandaloneCluster
from core.spark.cluster_config import ClusterConfig, WorkerSpec
from core.spark.session import SparkConfig


def recorded(root: Path, key: dict | None = None) -> ClassArchive:
    archive = ClassArchive(root)
    root.mkdir(parents=True)
    archive.conf_dir.mkdir(exist_ok=True)  # shared by the archives beside each other
    archive.driver.write_bytes(b"jsa")
    archive.executor.write_bytes(b"jsa")
    archive.key_file.write_text(json.dumps(key or current_key()))
    return archive


def maps(pid: int, archive: Path) -> bool:
    return str(archive) in Path(f"/proc/{pid}/maps").read_text()


def test_archives_are_offered_only_while_their_key_matches(tmp_path: Path) -> None:
    assert ClassArchive.installed(tmp_path / "none") is None
    assert ClassArchive.installed(recorded(tmp_path / "ok").root) == ClassArchive(tmp_path / "ok")
    stale = recorded(tmp_path / "stale", {**current_key(), "pyspark": "0.0.1"})
    assert ClassArchive.installed(stale.root) is None
    half = recorded(tmp_path / "half")
    half.executor.unlink()
    assert ClassArchive.installed(half.root) is None


def test_a_recording_archive_is_written_by_driver_and_executor_never_by_the_daemons(
    tmp_path: Path,
) -> None:
    archive = ClassArchive(tmp_path, recording=True)
    assert archive.driver_options() == f"-XX:ArchiveClassesAtExit={archive.driver}"
    assert archive.executor_options() == f"-XX:ArchiveClassesAtExit={archive.executor}"
    assert archive.daemon_options() == ""
    mapped = ClassArchive(tmp_path)
    assert mapped.driver_options().startswith(f"-XX:SharedArchiveFile={mapped.driver} ")
    assert mapped.daemon_options().startswith(f"-XX:SharedArchiveFile={mapped.executor} ")


def test_the_session_and_the_cluster_pass_the_archive_to_every_jvm(tmp_path: Path) -> None:
    archive = ClassArchive(tmp_path / "archive")
    options = dict(SparkConfig(class_archive=archive).options())
    assert archive.driver_options() in options["spark.driver.extraJavaOptions"]
    assert archive.executor_options() in options["spark.executor.extraJavaOptions"]
    bare = dict(SparkConfig(class_archive=None).options())
    assert (
        "SharedArchiveFile"
        not in bare["spark.driver.extraJavaOptions"] + bare["spark.executor.extraJavaOptions"]
    )
    # An executor's class path starts with its worker's SPARK_CONF_DIR: the archive's, whatever the run.
    cluster = StandaloneCluster(ClusterConfig(run_dir=tmp_path / "run", class_archive=archive))
    assert cluster.conf_dir == archive.conf_dir
    bare_cluster = StandaloneCluster(ClusterConfig(run_dir=tmp_path / "run", class_archive=None))
    assert bare_cluster.conf_dir == tmp_path / "run" / "conf"


@pytest.mark.spark
@pytest.mark.solo
def test_the_installed_archives_are_mapped_by_the_driver_and_the_daemons(spark, tmp_path: Path) -> None:
    archive = ClassArchive.installed()
    assert archive is not None, "no class archives for this pyspark and Java: run `make setup`"
    assert maps(spark.sparkContext._gateway.proc.pid, archive.driver)
    cluster = StandaloneCluster(ClusterConfig(run_dir=tmp_path, workers=(WorkerSpec(),))).start()
    try:
        daemons = cluster.pids()
        assert len(daemons) == 2  # the master and the worker
        assert all(maps(pid, archive.executor) for pid in daemons)
    finally:
        cluster.stop()

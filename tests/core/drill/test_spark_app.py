"""The drill's one application: a run's error reaches the user as the run reported it (or as its JVM's
log and its own log show it), through the real child process, and the application refuses a run that
would need another one. Fast: no Spark; the child here fails before it would start one."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from core.drill.run_policy import ERROR_FILE, Application, PolicyRun, _since
from core.drill.spark_app import SparkApp, child_failure
from core.errors import ConfigError, JvmDiedError, SpongeError
from core.spark.session import MemoryConfig


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
    e = child_failure(spec, 2, tmp_path)
    assert isinstance(e, JvmDiedError)
    assert e.message == f"the calibration probe failed: {died.message}" and e.hint == died.hint


def test_a_run_that_died_silently_is_read_from_the_application_s_jvm_log(tmp_path: Path) -> None:
    jvm_log = tmp_path / "app" / "jvm.log"
    jvm_log.parent.mkdir()
    jvm_log.write_text("#\n# java.lang.OutOfMemoryError: Java heap space\n")
    (tmp_path / "run.log").write_text(
        "Traceback (most recent call last):\nConnectionRefusedError: [Errno 111]\n"
    )
    spec = replace(_spec_for(tmp_path), policy="sponge", jvm_log=str(jvm_log))
    e = child_failure(spec, -9, tmp_path)
    assert isinstance(e, JvmDiedError)
    assert (
        "the sponge run failed (exit -9): its JVM ran out of memory: java.lang.OutOfMemoryError" in e.message
    )
    assert "--driver-memory (now 1g)" in e.hint and str(jvm_log) in e.hint


def test_a_run_that_failed_otherwise_shows_its_log_s_tail(tmp_path: Path) -> None:
    (tmp_path / "run.log").write_text("line\n" * 10 + "RuntimeError: boom\n")
    e = child_failure(_spec_for(tmp_path), 1, tmp_path)
    assert type(e) is SpongeError and e.message.endswith("RuntimeError: boom")
    assert "run.log" in e.hint


def test_a_child_s_error_travels_through_its_process(tmp_path: Path) -> None:
    """The real child process (`python -m core.drill.run_policy`), failing before it starts Spark: its
    error comes back whole, with no traceback, and the child has ended."""
    spec = _spec_for(tmp_path, query="q42")
    with SparkApp(tmp_path) as app, pytest.raises(ConfigError) as e:
        app.run(spec, tmp_path / "probe", status=lambda _: None)
    assert e.value.message == "the calibration probe failed: unknown query 'q42'"
    assert "sponge queries" in e.value.hint and "Traceback" not in e.value.one_line()
    assert app._proc is None
    assert "unknown query" in (tmp_path / "probe" / "run.log").read_text()


def test_a_run_needing_another_application_is_refused(tmp_path: Path) -> None:
    app = Application()
    app.base, app.master = frozenset({0}), "local[2,4]"
    spec = _spec_for(tmp_path)
    assert app._vm_cpus(spec) == frozenset({0})
    with pytest.raises(ConfigError, match="another application"):
        app._vm_cpus(replace(spec, base_cpus=[1], vm_cpus=[1]))
    with pytest.raises(ConfigError, match="another application"):
        app._vm_cpus(replace(spec, master="local[4]"))
    with pytest.raises(ConfigError, match="only standalone VMs can grow"):  # Over's cores need a VM pool
        app._vm_cpus(replace(spec, vm_cpus=[0, 1], base_cpus=[0], worker_cpus=[1]))


def test_a_run_counts_the_tasks_of_the_executors_it_had() -> None:
    before = [
        {"id": "0", "active": True, "completed_tasks": 100, "failed_tasks": 1},
        {"id": "1", "active": False, "completed_tasks": 40, "failed_tasks": 0},  # an earlier run's VM
    ]
    after = [
        {"id": "0", "active": True, "completed_tasks": 130, "failed_tasks": 1},
        {"id": "1", "active": False, "completed_tasks": 40, "failed_tasks": 0},
        {"id": "2", "active": True, "completed_tasks": 12, "failed_tasks": 0},  # this run's VM
    ]
    assert [(e["id"], e["completed_tasks"], e["failed_tasks"]) for e in _since(after, before)] == [
        ("0", 30, 0),
        ("2", 12, 0),
    ]

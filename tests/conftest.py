"""Shared pytest fixtures, and the lanes the suite runs in.

The lanes (markers in pyproject.toml, strict):
    fast    -m "not spark and not slow" (make test-fast): tests that run in this process; a one-shot
            command the test waits for (ruff, a fresh interpreter that checks an import, a CPU burner)
            is allowed.
    spark   starts a Spark session (the JVM).
    slow    starts the product's own processes (the agent as its own process, embedded-fleet workers,
            LocalStack, a Spark cluster), or takes more than a few seconds.

Where the markers come from:
  1. marks written in the test files;
  2. `pytest_collection_modifyitems` below: a test that uses the `spark` fixture gets `spark`;
  3. the lane guard: a test left in the fast lane that starts Spark or one of the product's processes
     anyway (seen through the `subprocess.Popen` audit event) fails with the command line, so a
     missing mark is found the first time the test runs.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

# Product processes, run as `python -m <module>`: the guard looks for them in what a test starts.
PROCESS_COMMANDS = {
    "router.agent": "the agent as its own process",
    "lambda_worker.local_runtime": "an embedded-fleet worker",
    "localstack.runtime.main": "LocalStack",
}
SPARK_LAUNCHERS = ("spark-submit", "spark-class")  # what pyspark and core/spark/cluster.py run


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    """One local Spark session for the whole run, built like the product's: JVM start-up dominates.

    `local[2]`, not the product's `local[2,4]`: a task that fails once fails its query, so no test
    passes on a retry it never sees. Tests that inject task failures run `sponge run` in a process of
    its own, with the product's retries.
    """
    from core.spark.session import SparkConfig, spark_session

    session = spark_session(SparkConfig(master="local[2]", shuffle_partitions=2, app_name="sponge-tests"))
    yield session
    session.stop()


# --- marking at collection -------------------------------------------------------------------------


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that uses the `spark` fixture is in the spark lane, whether or not its file says so."""
    for item in items:
        if "spark" in item.fixturenames and item.get_closest_marker("spark") is None:
            item.add_marker(pytest.mark.spark)


# --- the lane guard ------------------------------------------------------------------------------------

_running: dict[str, Any] = {"item": None, "started": []}
_running_lock = threading.Lock()


def product_process(argv: list[str]) -> tuple[str, str] | None:
    """(what, marker it needs) when `argv` starts Spark or one of the product's processes, else None."""
    if argv and os.path.basename(argv[0]) in SPARK_LAUNCHERS:
        return "Spark", "spark"
    for i, arg in enumerate(argv[:-1]):
        if arg == "-m" and argv[i + 1] in PROCESS_COMMANDS:
            return PROCESS_COMMANDS[argv[i + 1]], "slow"
    return None


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event != "subprocess.Popen" or _running["item"] is None:
        return
    raw = args[1]
    argv = [os.fsdecode(a) for a in ([raw] if isinstance(raw, (str, bytes, os.PathLike)) else raw)]
    if (kind := product_process(argv)) is not None:
        with _running_lock:
            _running["started"].append((kind, argv))


sys.addaudithook(_audit)  # audit hooks stay for the interpreter's life; _audit is idle outside tests


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    with _running_lock:  # before any fixture, so module- and session-scoped ones are watched too
        _running["item"], _running["started"] = item, []


@pytest.fixture(autouse=True)
def _lane_guard(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fails a test whose markers keep it in a lane it does not belong to (see the module doc)."""
    yield
    started, _running["item"] = _running["started"], None
    for (what, needs), argv in started:
        if needs == "spark" and request.node.get_closest_marker("spark") is None:
            pytest.fail(f"this test starts {what} ({' '.join(argv[:4])} ...) but is not marked spark")
        if needs == "slow" and not any(request.node.get_closest_marker(m) for m in ("slow", "spark")):
            pytest.fail(
                f"this test starts {what} ({' '.join(argv[:4])} ...) but is in the fast lane: mark it slow"
            )

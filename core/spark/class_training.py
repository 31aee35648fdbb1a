"""Record Spark's class archives (core/spark/class_archive.py) from a training run: `make setup` runs
`python -m core.spark.class_training`, which does nothing while the archives are up to date."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from core.errors import SpongeError
from core.spark.class_archive import DEFAULT_ROOT, ClassArchive, current_key

#: What the training runs: a keyed join (Q3) and a Python stateful processor on RocksDB (Q5), the
#: paths every drill and most tests take, through a parquet sink on a standalone cluster.
TRAINING_QUERIES = ("q5", "q3")
TRAINING_EVENTS = 300_000
EXECUTOR_EXIT_TIMEOUT_S = 120.0  # an executor writes its archive as it exits: ~10 s here


class ClassArchiveError(SpongeError):
    """The training run did not leave both archives."""


def build(root: Path = DEFAULT_ROOT, say: Callable[[str], None] = print) -> ClassArchive:
    """Record both archives from a training run in a child process (its driver JVM writes its archive
    as the process exits), into a fresh directory that replaces `root` only when both are there."""
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".spark-classes-", dir=root.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the archives are read by every user's JVMs
    try:
        recording = ClassArchive(staging, recording=True)
        recording.conf_dir.mkdir(exist_ok=True)
        started = time.monotonic()
        child = subprocess.run(
            [sys.executable, "-m", "core.spark.class_training", "--train", str(staging)],
            capture_output=True,
            text=True,
            check=False,
        )
        missing = [p.name for p in (recording.driver, recording.executor) if not p.exists()]
        if child.returncode != 0 or missing:
            tail = "\n".join((child.stderr or child.stdout).splitlines()[-15:])
            raise ClassArchiveError(
                f"the training run left no {' or '.join(missing) or 'usable archives'} "
                f"(exit {child.returncode}):\n{tail}",
                hint="Spark runs without the archives, only slower to start; run `make setup` again to retry",
            )
        recording.key_file.write_text(json.dumps(current_key()))
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
        say(f"spark-classes: recorded in {time.monotonic() - started:.0f} s under {root}")
        return ClassArchive(root)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def _train(staging: Path) -> None:
    """Run the training queries on a standalone cluster whose JVMs record what they load; the executor
    is stopped with SIGTERM, on which it writes its archive (the worker's own kill does not wait for it)."""
    from core.nexmark.generator import GeneratorConfig
    from core.spark.cluster import StandaloneCluster, alive
    from core.spark.cluster_config import ClusterConfig, WorkerSpec
    from core.spark.runner import RunConfig, run_query
    from core.spark.session import SparkConfig, stop_active_session
    from core.spark.vm_pool import EXECUTOR_CLASS, cmdline

    archive = ClassArchive(staging, recording=True)
    worker = WorkerSpec(cores=2, memory_mb=1024)
    config = ClusterConfig(run_dir=staging / "run" / "cluster", workers=(worker,), class_archive=archive)
    cluster = StandaloneCluster(config).start()
    try:
        spark = SparkConfig(master=cluster.master_url, class_archive=archive)
        for query in TRAINING_QUERIES:
            run_query(
                RunConfig(
                    query=query,
                    generator=GeneratorConfig(seed=1, events=TRAINING_EVENTS),
                    output=staging / "run" / query,
                    max_events_per_batch=TRAINING_EVENTS // 6,
                    spark=spark,
                )
            )
        executors = [pid for pid in cluster.pids() if any(a.endswith(EXECUTOR_CLASS) for a in cmdline(pid))]
        for pid in executors:
            os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + EXECUTOR_EXIT_TIMEOUT_S
        while any(alive(pid) for pid in executors) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_active_session()
        cluster.stop()
        shutil.rmtree(staging / "run", ignore_errors=True)


def main(argv: list[str]) -> int:
    """`python -m core.spark.class_training`: record the archives unless they are up to date (make setup)."""
    if argv[:1] == ["--train"]:
        _train(Path(argv[1]))
        return 0
    if ClassArchive.installed() is not None and "--force" not in argv:
        print(f"spark-classes: up to date under {DEFAULT_ROOT}")
        return 0
    print("spark-classes: recording Spark's classes for faster JVM starts (about a minute, once) ...")
    try:
        build()
    except SpongeError as e:
        print(f"spark-classes: warning: {e.one_line()}", file=sys.stderr)  # Spark still runs, only slower
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""Spark's classes in shared archives that every Spark JVM maps at start (AppCDS), recorded once at setup.

Why: a Spark JVM spends most of its start, and of its first query, loading and verifying classes from
pyspark's ~250 jars, and on a busy core that is seconds per JVM: a drill's run starts four (master,
worker, driver, executor), a test lane hundreds. A dynamic class-data archive (JDK 13+) recorded from
a training run is mapped instead. A local session's start and first query took 5.3 s against 12.4 s,
and a q5 and a q3 run on a standalone cluster 33-37 s against 45-48 s (docs/adr/0057).

A JVM maps an archive only when its class path starts as the training's did, so there are two:
- the driver's: PySpark's launcher puts the jars on its class path;
- the executors' and the daemons': spark-class puts SPARK_CONF_DIR first, so the daemons of every
  cluster get one fixed, empty conf directory beside the archives (a cluster's own directory would
  differ per run, and a JVM maps no archive whose class path names a directory that is gone).

A JVM that cannot map its archive (another JDK, another pyspark, a moved virtualenv) starts as it
would without one: the JVM falls back by itself, quietly. `installed()` offers the archives only when
their key still matches, and `make setup` records them again when it does not
(core/spark/class_training.py).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import Any

from core.spark.java import java_binary

#: Under the virtualenv: the archives name its jars by absolute path, so they belong to it.
DEFAULT_ROOT = Path(sys.prefix) / "share" / "sponge" / "spark-classes"
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # a JVM that cannot map an archive must not say so on stdout


@dataclass(frozen=True)
class ClassArchive:
    """The archives under `root`; `recording`: the JVMs write them as they exit instead of mapping them."""

    root: Path = DEFAULT_ROOT
    recording: bool = False

    @property
    def driver(self) -> Path:
        return self.root / "driver.jsa"

    @property
    def executor(self) -> Path:
        return self.root / "executor.jsa"

    @property
    def conf_dir(self) -> Path:
        """SPARK_CONF_DIR of every cluster's daemons: empty, and at the path the executors' archive was
        recorded with (beside the archives, not among them: they are recorded elsewhere, then moved)."""
        return self.root.parent / "spark-conf"

    @property
    def key_file(self) -> Path:
        return self.root / "key.json"

    def driver_options(self) -> str:
        if self.recording:
            return f"-XX:ArchiveClassesAtExit={self.driver}"
        return f"-XX:SharedArchiveFile={self.driver} {QUIET}"

    def executor_options(self) -> str:
        if self.recording:
            return f"-XX:ArchiveClassesAtExit={self.executor}"
        return f"-XX:SharedArchiveFile={self.executor} {QUIET}"

    def daemon_options(self) -> str:
        """Master and workers map the executors' archive (their class path is the same); they never
        record one, as they would all write the same file."""
        return "" if self.recording else f"-XX:SharedArchiveFile={self.executor} {QUIET}"

    @classmethod
    def installed(cls, root: Path = DEFAULT_ROOT) -> ClassArchive | None:
        """The archives under `root` if they were recorded for this pyspark and this Java, else None."""
        archive = cls(root)
        try:
            saved = json.loads(archive.key_file.read_text())
        except (FileNotFoundError, ValueError):
            return None
        ready = archive.driver.exists() and archive.executor.exists() and archive.conf_dir.is_dir()
        return archive if ready and saved == current_key() else None


def current_key() -> dict[str, Any]:
    """What archives must have been recorded with to be mapped: pyspark's version (its jars) and the
    Java binary (another JDK maps none)."""
    java = java_binary()
    stat = java.resolve().stat() if java is not None else None
    return {
        "pyspark": version("pyspark"),
        "java": str(java.resolve()) if java is not None else None,
        "java_mtime_ns": stat.st_mtime_ns if stat is not None else None,
        "java_size": stat.st_size if stat is not None else None,
    }

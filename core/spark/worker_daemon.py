"""The Python workers' daemon: PySpark's own, started so that its workers import PySpark once, compiled.

Why: Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the Python workers' path. Python cannot
cache the bytecode of modules it imports from a zip, so every worker the daemon forks compiled
`pyspark.worker` and the SQL, Arrow and streaming modules it pulls in from source. Profiled on a Q5
probe run (one VM core): the workers spent 19.8 s of the VM core's CPU importing, against 22.9 s of
work, and the first epochs of every run waited for it.

Two remedies, both safe to fork after:
* when the zip is the one inside the pip-installed `pyspark` package (Spark's home is that package,
  as on every drill's cluster), the same release is importable from site-packages, whose bytecode is
  cached: the zip is moved behind it. On a cluster whose Spark home is elsewhere the path is left
  as Spark set it, since the installed package may be another release;
* `pyspark.worker` is imported here, before the daemon forks, so workers inherit it. It imports no
  pandas, pyarrow or polars and starts no thread (PySpark's daemon imports the worker module after
  the fork because those libraries start threads on import; `tests/core/spark/test_worker_daemon.py`
  checks this module keeps them out).

Chosen in SparkConfig with `spark.python.daemon.module`.
"""

from __future__ import annotations

import sys
from pathlib import Path


def prefer_installed_pyspark(path: list[str], installed: Path | None) -> list[str]:
    """`path` with every entry inside `installed` (the pip-installed pyspark's directory: its own
    pyspark.zip and py4j zip) moved behind the entries that follow it, so the package's compiled copy is
    found first; unchanged when pyspark is not installed or no entry is inside it."""
    if installed is None:
        return path
    inside = [p for p in path if p and Path(p).is_relative_to(installed)]
    return [p for p in path if p not in inside] + inside if inside else path


def _installed_pyspark() -> Path | None:
    for entry in sys.path:
        if entry.endswith(".zip") or not entry:
            continue
        candidate = Path(entry) / "pyspark" / "__init__.py"
        if candidate.is_file():
            return candidate.parent
    return None


def main() -> None:
    sys.path[:] = prefer_installed_pyspark(sys.path, _installed_pyspark())
    import pyspark.worker  # noqa: F401  (inherited by every forked worker)
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()

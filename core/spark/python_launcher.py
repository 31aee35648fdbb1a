"""The interpreter Spark starts for Python processes: this virtualenv's, with PySpark found compiled.

Why: Spark puts `$SPARK_HOME/python/lib/pyspark.zip` first on the path of every Python process it
starts: the workers' daemon on each executor, and on the driver the planners of a Python data source
(one process per step, at every query start). Python caches no bytecode for modules it imports from a
zip, so each of them compiled PySpark's SQL, Arrow and streaming modules from source. Profiled on a
Q5 probe run (one VM core): those processes spent 14 s of the VM core's CPU compiling and importing,
against 23 s of work, most of it at each query's start, which the first epochs wait for.

When that zip is the one inside the pip-installed `pyspark` package (Spark's home is that package, as
on every drill's cluster and `sponge run`), the same release is importable from site-packages, whose
bytecode is cached, so the launcher puts site-packages before the package's zips and execs the
interpreter. On a cluster whose Spark home is elsewhere the path stays as Spark set it: the installed
package may be another release.

`sponge-python` (pyproject's scripts) runs `main`; core/spark/session.py makes it PySpark's python.
"""

from __future__ import annotations

import os
import sys
import sysconfig
from pathlib import Path


def prefer_installed_pyspark(path: list[str], installed: Path | None) -> list[str]:
    """`path` with the directory that holds `installed` (the pip-installed pyspark package) put just
    before the first entry inside the package (its own pyspark.zip or py4j zip), so the package's
    compiled copy is found first; unchanged when pyspark is not installed or no entry is inside it."""
    if installed is None:
        return path
    inside = [i for i, p in enumerate(path) if p and Path(p).is_relative_to(installed)]
    if not inside:
        return path
    first = inside[0]
    return [*path[:first], str(installed.parent), *path[first:]]


def installed_pyspark() -> Path | None:
    """The pip-installed pyspark package of this interpreter, found without importing it (an import
    here would come from the zip the path puts first)."""
    package = Path(sysconfig.get_paths()["purelib"]) / "pyspark"
    return package if (package / "__init__.py").is_file() else None


def launcher() -> str:
    """What PySpark should start for its Python processes: this script beside the interpreter, or the
    interpreter itself where the project was installed without its scripts."""
    script = Path(sys.executable).with_name("sponge-python")
    return str(script) if script.is_file() else sys.executable


def main() -> None:
    path = os.environ.get("PYTHONPATH", "")
    if path:
        ordered = prefer_installed_pyspark(path.split(os.pathsep), installed_pyspark())
        os.environ["PYTHONPATH"] = os.pathsep.join(ordered)
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])


if __name__ == "__main__":
    main()

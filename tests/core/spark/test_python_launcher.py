from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from core.spark.python_launcher import installed_pyspark, launcher, prefer_installed_pyspark

SITE = "/venv/lib/python3.11/site-packages"
ZIP = f"{SITE}/pyspark/python/lib/pyspark.zip"
PY4J = f"{SITE}/pyspark/python/lib/py4j-0.10.9.9-src.zip"


def test_the_installed_packages_zips_go_behind_its_compiled_copy() -> None:
    path = ["/user/first", ZIP, PY4J, "/work/main"]
    assert prefer_installed_pyspark(path, Path(SITE) / "pyspark") == [
        "/user/first",
        SITE,
        ZIP,
        PY4J,
        "/work/main",
    ]


def test_a_spark_home_elsewhere_keeps_the_path_spark_set() -> None:
    """The installed package may be another release than the cluster's Spark: its zip stays first."""
    path = ["/opt/spark/python/lib/pyspark.zip", SITE]
    assert prefer_installed_pyspark(path, Path(SITE) / "pyspark") == path
    assert prefer_installed_pyspark(path, None) == path


def test_a_process_spark_starts_imports_pyspark_compiled_from_site_packages() -> None:
    """Spark's own path (the package's zip first): through the launcher, pyspark comes from the package
    directory, where its bytecode is cached, not from the zip."""
    package = installed_pyspark()
    assert package is not None
    zips = sorted(str(p) for p in (package / "python" / "lib").glob("*.zip"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(zips)}
    probe = "import pyspark.sql.worker.plan_data_source_read as m; print(m.__file__)"
    out = subprocess.run(
        [launcher(), "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == str(package / "sql" / "worker" / "plan_data_source_read.py")
    bare = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()
    assert ".zip" in bare  # what Spark's path does without the launcher

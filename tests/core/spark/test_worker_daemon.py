from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from core.spark.worker_daemon import prefer_installed_pyspark

SITE = "/venv/lib/python3.11/site-packages"
ZIP = f"{SITE}/pyspark/python/lib/pyspark.zip"
PY4J = f"{SITE}/pyspark/python/lib/py4j-0.10.9.9-src.zip"


def test_the_installed_packages_zips_go_behind_its_compiled_copy() -> None:
    path = ["", ZIP, PY4J, "/usr/lib/python311.zip", SITE]
    assert prefer_installed_pyspark(path, Path(SITE) / "pyspark") == [
        "",
        "/usr/lib/python311.zip",
        SITE,
        ZIP,
        PY4J,
    ]


def test_a_spark_home_elsewhere_keeps_the_path_spark_set() -> None:
    """The installed package may be another release than the cluster's Spark: its zip stays first."""
    path = ["", "/opt/spark/python/lib/pyspark.zip", SITE]
    assert prefer_installed_pyspark(path, Path(SITE) / "pyspark") == path
    assert prefer_installed_pyspark(path, None) == path


def test_the_daemon_forks_with_no_thread_starting_library_imported() -> None:
    """PySpark's daemon imports a worker module only after the fork because pandas and pyarrow start
    threads on import, and a fork copies none of them: what the daemon preloads must not pull them in."""
    probe = (
        "import sys, threading, core.spark.worker_daemon, pyspark.worker;"
        "heavy = [m for m in ('pandas', 'pyarrow', 'polars', 'numpy') if m in sys.modules];"
        "print(heavy, threading.active_count())"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[] 1"

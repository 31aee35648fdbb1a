"""A run whose Spark JVM runs out of heap ends with one line that names the OutOfMemoryError, the memory in
force and the flag that raises it: not a py4j traceback, and not a wait for progress that never comes.

How the JVM is made to die at once and every time: the smallest heap Spark runs with (512m) and one input
record larger than half of it (a 360 MB string). Spark must copy the record onto the heap as a whole
(an UnsafeRow, then the Parquet writer's page), which no 512 MB heap can hold next to Spark itself, while
the record still fits the JVM's direct memory (as large as the heap) that Arrow brings it in through.
A state that outgrows the heap kills it too (tests/core/spark/jvm_logs/join_oom.log is such a run), but
only after minutes of garbage collection.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark, pytest.mark.slow, pytest.mark.timeout(600)]

SPONGE = [sys.executable, "-c", "from core.cli.main import main; main()"]
RECORD_MB = 360


def input_with_a_huge_bid(root: Path) -> Path:
    from core.nexmark.generator import GeneratorConfig
    from core.nexmark.jsonl import write_jsonl_events

    write_jsonl_events(GeneratorConfig(seed=1, events=2_000), root, files_per_entity=1)
    (first,) = sorted((root / "bid").glob("*.jsonl"))
    bid = json.loads(first.read_text().splitlines()[0])
    with (root / "bid" / "part-99999.jsonl").open("w") as f:
        f.write(json.dumps({**bid, "extra": "x" * (RECORD_MB << 20)}) + "\n")
    return root


def test_a_run_whose_jvm_runs_out_of_heap_says_so_and_how_to_fix_it(tmp_path: Path) -> None:
    events, out = input_with_a_huge_bid(tmp_path / "in"), tmp_path / "out"
    args = ["run", "q0", "--input", str(events), "--driver-memory", "512m", "--output", str(out)]
    p = subprocess.run([*SPONGE, *args], capture_output=True, text=True, timeout=540, check=False)

    assert p.returncode == 2, p.stderr[-3000:]
    assert p.stdout == ""
    for noise in ("Traceback", "py4j", "Py4J", "ConnectionRefusedError", "EOFError"):
        assert noise not in p.stderr, p.stderr[-3000:]
    (line,) = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert line.startswith("error: Spark's JVM died of java.lang.OutOfMemoryError: Java heap space"), line
    assert "--driver-memory 512m in force" in line  # the setting in force
    assert "raise it, e.g. --driver-memory 1g" in line  # how to raise it: the flag
    log = out / "_logs" / "jvm.log"
    assert f"the JVM's log: {log}" in line
    assert "java.lang.OutOfMemoryError" in log.read_text(errors="replace")
    assert not (out / "summary.json").exists()

"""The CLI contract: compile JSON shape, query listing, and one-line errors instead of tracebacks."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.nexmark.queries import QUERIES

SPONGE = [sys.executable, "-c", "from core.cli.main import main; main()"]


def sponge(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*SPONGE, *args], capture_output=True, text=True, env=env, timeout=300, check=False)


def assert_one_line_error(p: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert p.returncode != 0
    assert "Traceback" not in p.stderr and "Traceback" not in p.stdout
    lines = [ln for ln in p.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, p.stderr
    assert lines[0].startswith("error: ")
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.mark.parametrize("query", list(QUERIES))
def test_compile_json_contract(query: str) -> None:
    p = sponge("compile", query, "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert set(doc) == {"query", "logical", "rewritten", "rewrite_ms", "offload_chains"}
    assert doc["query"] == query and isinstance(doc["rewrite_ms"], float)  # how fast: bench.throughput
    assert all(set(n) == {"id", "op", "stateful"} for n in doc["logical"]["nodes"])
    assert all(set(n) == {"id", "op", "kind", "of", "placement"} for n in doc["rewritten"]["nodes"])
    for e in doc["logical"]["edges"] + doc["rewritten"]["edges"]:
        assert set(e) == {"src", "dst", "comm"} and e["comm"] in ("one_to_one", "shuffle", "broadcast")
    kinds = {n["kind"] for n in doc["rewritten"]["nodes"]}
    assert kinds <= {"original", "router", "transient", "merge"} and "transient" in kinds
    for n in doc["rewritten"]["nodes"]:
        assert (n["of"] is None) == (n["kind"] == "original")
        assert n["placement"] == ("sf" if n["kind"] == "transient" else "vm")
    ids = {n["id"] for n in doc["logical"]["nodes"]}
    for c in doc["offload_chains"]:
        assert set(c) == {"entity", "nodes", "kind", "fused", "keyed_op"}
        assert c["kind"] in ("rows", "partial", "side_counts", "keyed")
        assert set(c["nodes"]) | set(c["fused"]) <= ids and c["nodes"]


def test_compile_says_what_a_burst_moves_to_workers_and_what_stays() -> None:
    p = sponge("compile", "q8")
    assert "what runs on workers during a burst" in p.stdout
    assert "window_join6 (with key_by7, window_aggregate8)" in p.stdout
    assert "stays on the VM: no stateful operator" in p.stdout
    assert "top_k5: workers rank each closed window's key groups" in sponge("compile", "q5").stdout
    q4 = sponge("compile", "q4").stdout
    fused = "winner_at_close6 (with key_by7, window_aggregate8)"
    assert f"bid      map4 ─ key_by5 ─ {fused}: workers run whole key groups of it, by bid.auction" in q4
    assert "stays on the VM: no stateful operator" in q4
    q6 = sponge("compile", "q6").stdout
    assert "latest_aggregate8: workers run the plan's key groups of it, by its seller" in q6
    assert "stays on the VM: no stateful operator" in q6
    q3 = sponge("compile", "q3").stdout
    assert "window_join8: workers run whole key groups of it, by auction.seller" in q3
    assert "stays on the VM: no stateful operator" in q3


def test_compile_draws_both_dags() -> None:
    p = sponge("compile", "q5")
    assert p.returncode == 0
    assert "logical DAG" in p.stdout and "after operator insertion" in p.stdout and "[SF]" in p.stdout


def test_queries_lists_one_line_each() -> None:
    p = sponge("queries")
    lines = p.stdout.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(QUERIES)


@pytest.mark.parametrize(
    ("args", "needles"),
    [
        (("compile", "q42"), ("unknown query 'q42'", "q0")),
        (("run", "q1", "--events", "-3", "-o", "x"), ("--events", "sponge run --help")),
        (("run", "q1", "--events", "many", "-o", "x"), ("--events",)),
        (("run", "q1", "--rate", "0", "-o", "x"), ("--rate",)),
        (("run", "q1", "--bogus", "-o", "x"), ("--bogus",)),
        (("run", "q1"), ("--output",)),
        (("run", "q5", "-o", "x", "--window-size", "10", "--window-slide", "3"), ("multiple of the slide",)),
        (("reference", "nope", "-o", "x"), ("unknown query",)),
        (("run", "q1", "-o", "x", "--offload-share", "1.5"), ("--offload-share",)),
        (("run", "q1", "-o", "x", "--offload-share", "0.5", "--workers", "0"), ("--workers",)),
        (("run", "q1", "-o", "x", "--offload-share", "0.5", "--target", "aws"), ("aws", "sponge deploy")),
        (("run", "q1", "-o", "x", "--inject", "throttle:share=0.2"), ("--inject needs --offload-share",)),
        (("run", "q1", "-o", "x", "--offload-share", "0.5", "--inject", "boom:x=1"), ("unknown fault kind",)),
        (
            ("run", "q1", "-o", "x", "--offload-share", "0.5", "--inject", "throttle:share=2"),
            ("not in [0, 1]",),
        ),
    ],
)
def test_bad_input_gives_one_line_error(args: tuple[str, ...], needles: tuple[str, ...]) -> None:
    assert_one_line_error(sponge(*args), *needles)


def test_missing_java_is_one_line_with_a_fix(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # no java here
    p = sponge("run", "q1", "--events", "10", "-o", str(tmp_path / "out"), env=env)
    assert_one_line_error(p, "Java", "install")

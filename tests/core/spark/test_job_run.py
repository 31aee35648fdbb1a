"""A user's own job streamed through Spark: its own schema read from its own files, its output checked
against the same computation written out in plain Python."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime
from pathlib import Path
from types import ModuleType

import pyarrow as pa
import pytest

from core.errors import ConfigError
from core.nexmark.generator import GeneratorConfig
from core.results import diff_results, read_results
from core.run_status import read_status
from core.spark.live_policy import FileBacklog, LivePolicy
from core.spark.offload_session import OffloadConfig
from core.spark.runner import RunConfig, run_query

pytestmark = pytest.mark.spark

SPONGE = [sys.executable, "-c", "from core.cli.main import main; main()"]
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
EXAMPLE = EXAMPLES / "page_views.py"
SIZE_US, SLIDE_US = 10_000_000, 2_000_000


def _example(name: str = "page_views") -> ModuleType:
    """An example job file run as a module, for the data generator it holds."""
    spec = importlib.util.spec_from_file_location(f"{name}_example", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _expected(input_dir: Path) -> pa.Table:
    """Top 3 pages (ties kept) by views per 10 s window sliding by 2 s, over views with ms > 0."""
    counts: dict[tuple[int, str], list[float]] = defaultdict(lambda: [0, 0.0])
    for path in sorted((input_dir / "view").glob("*.jsonl")):
        for line in path.read_text().splitlines():
            v = json.loads(line)
            if not isinstance(v.get("at"), str) or not isinstance(v.get("page"), str) or v["ms"] <= 0:
                continue  # a dead letter, or a view the filter drops
            us = _us(v["at"])
            last = us - us % SLIDE_US
            for start in range(last, us - SIZE_US, -SLIDE_US):
                c = counts[(start, v["page"])]
                c[0] += 1
                c[1] += v["ms"] / 1000
    by_window: dict[int, list[tuple[str, int, float]]] = defaultdict(list)
    for (start, page), (n, secs) in counts.items():
        by_window[start].append((page, int(n), secs))
    rows = []
    for start, pages in by_window.items():
        third = sorted((n for _, n, _ in pages), reverse=True)[:3][-1]
        rows += [(start, start + SIZE_US, p, n, s) for p, n, s in pages if n >= third]
    names = ["window_start", "window_end", "page", "views", "dwell"]
    columns = list(zip(*rows, strict=True))
    ts = pa.timestamp("us", tz="UTC")
    types = [ts, ts, pa.string(), pa.int64(), pa.float64()]
    return pa.table({n: pa.array(c, t) for n, c, t in zip(names, columns, types, strict=True)})


def _us(text: str) -> int:
    at = datetime.fromisoformat(text)
    return int(at.timestamp()) * 1_000_000 + at.microsecond


def _site_temperatures(input_dir: Path) -> pa.Table:
    """Readings joined with their device's site; per site and 60 s window sliding by 10 s: count, mean
    and max temperature."""
    sites = {}
    for path in (input_dir / "device").glob("*.jsonl"):
        sites |= {d["device_id"]: d["site"] for d in map(json.loads, path.read_text().splitlines())}
    groups: dict[tuple[int, str], list[float]] = defaultdict(list)
    size, slide = 60_000_000, 10_000_000
    for path in (input_dir / "reading").glob("*.jsonl"):
        for r in map(json.loads, path.read_text().splitlines()):
            if r["device"] not in sites:
                continue
            us = _us(r["at"])
            for start in range(us - us % slide, us - size, -slide):
                groups[(start, sites[r["device"]])].append(r["temp"])
    ts = pa.timestamp("us", tz="UTC")
    keys = sorted(groups)
    return pa.table(
        {
            "window_start": pa.array([k[0] for k in keys], ts),
            "window_end": pa.array([k[0] + size for k in keys], ts),
            "site": [k[1] for k in keys],
            "readings": pa.array([len(groups[k]) for k in keys], pa.int64()),
            "avg_temp": [sum(groups[k]) / len(groups[k]) for k in keys],
            "max_temp": [max(groups[k]) for k in keys],
        }
    )


def test_a_job_joining_two_of_its_own_sources_offloaded_by_the_policy_equals_the_computation_in_python(
    spark, tmp_path: Path
) -> None:
    """The policy offloads once the input outruns what it believes the VMs carry (a per-core rate far
    below this machine's: every backlog is a burst); the workers run the join's and the windowed
    statistics' transient operators, and the VM merges their partials with its own."""
    _example("site_temperatures").write_readings(
        str(tmp_path / "in"), 12_000, devices=60, rate=300.0, files=12
    )
    config = RunConfig(
        query=f"{EXAMPLES / 'site_temperatures.py'}:job",
        generator=GeneratorConfig(seed=0, events=0),
        output=tmp_path / "out",
        input=tmp_path / "in",
        max_files_per_batch=1,  # many epochs: the policy decides after the first; the join's state carries
        offload=OffloadConfig(share=0.0),
    )
    backlog = FileBacklog(tmp_path / "in", list(config.job().sources.values()), follow=False)
    live = LivePolicy("sponge", config.output, backlog, per_core_rate=50.0, rho=5.0, max_workers=2)
    summary = run_query(config, progress=live.progress, hooks=live)
    expected = _site_temperatures(tmp_path / "in")
    actual = read_results(tmp_path / "out")
    assert expected.num_rows > 0 and summary["policy"]["max_share"] > 0
    assert summary["records_in"] == 12_000 + 54 and 0 < summary["records_routed_to_workers"] < 12_054
    # The policy's backlog, read from Spark's own progress, ends with every record read and committed;
    # the status files beside the results say the run ended.
    assert backlog.released() == backlog.committed() == 12_054
    status = read_status(tmp_path / "out")
    assert status["state"] == "ended" and status["live"]["state"] == "stopped"
    # Every routed record ran once, on a worker or (a worker late on a busy machine) in the agent.
    routed, by_workers = summary["records_routed_to_workers"], summary["records_offloaded"]
    assert by_workers + summary["records_run_locally_by_agent"] == routed
    assert summary["operators_offloaded"].get("window_join4", 0) == by_workers
    assert diff_results(actual.select(expected.column_names), expected) is None, diff_results(
        actual, expected
    )
    run_query(replace(config, output=tmp_path / "plain", offload=None))  # offloading off, same input
    without = read_results(tmp_path / "plain")
    assert diff_results(actual, without) is None, diff_results(actual, without)


def test_a_job_file_needs_its_input(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no --input was given"):
        RunConfig(
            query=f"{EXAMPLE}:job", generator=GeneratorConfig(seed=0, events=0), output=tmp_path / "out"
        )


def _committed(out: Path) -> int:
    commits = out / "_checkpoint" / "commits"
    return len([p for p in commits.iterdir() if p.name.isdigit()]) if commits.is_dir() else 0


def _wait_for(
    what: str, check: Callable[[], bool], proc: subprocess.Popen[str], timeout_s: float = 180.0
) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() < deadline, f"no {what} in {timeout_s:.0f} s"
        time.sleep(0.5)


def _decisions(out: Path) -> list[dict]:
    path = out / "_policy" / "decisions.jsonl"
    lines = path.read_text().splitlines() if path.is_file() else []
    return [d for d in map(json.loads, lines) if "decision" in d]


def test_a_followed_run_offloads_a_burst_stops_on_sigterm_and_resumes_to_the_no_offload_output(
    spark, tmp_path: Path
) -> None:
    """The whole life of a user's job: with the policy on it follows its input; a burst of files
    arrives and the policy offloads; SIGTERM stops it once its epoch commits; a restart resumes it to
    the end. Nothing lost or repeated: the output equals a run with offloading off over the same input,
    and the computation in plain Python."""
    staged, inp, out = tmp_path / "staged", tmp_path / "in", tmp_path / "out"
    _example().write_views(str(staged), 100_000, rate=2_000.0, files=20)
    (inp / "view").mkdir(parents=True)
    parts = sorted((staged / "view").glob("part-*.jsonl"))
    for part in parts[:4]:
        shutil.copy(part, inp / "view" / part.name)
    bad = '{"user": 1, "page": "/p1", "at": null, "ms": 5}\n{"user": "x"}\n'
    (inp / "view" / "part-00003.jsonl").write_text((inp / "view" / "part-00003.jsonl").read_text() + bad)
    # A per-core rate far below this machine's makes the burst outrun the VMs whatever the load here.
    policy = ["--policy", "sponge", "--per-core-rate", "5000", "--workers", "2"]
    cmd = [*SPONGE, "run", f"{EXAMPLE}:job", "--input", str(inp), "--output", str(out), *policy]
    proc = subprocess.Popen(
        [*cmd, "--batch-files", "4"], stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        _wait_for("two epochs of the first files", lambda: _committed(out) >= 2, proc)
        for part in parts[4:]:  # the burst: whole files, renamed into place as a writer would
            shutil.copy(part, inp / "view" / f".{part.name}.tmp")
            (inp / "view" / f".{part.name}.tmp").rename(inp / "view" / part.name)
        _wait_for(
            "the policy offloading the burst",
            lambda: any(d["decision"]["share"] > 0 for d in _decisions(out)),
            proc,
        )
        _wait_for("an epoch read partly by workers", lambda: _committed(out) >= 4, proc)
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-2000:]
    assert "stopping once the epoch in flight commits" in stderr
    stopped = json.loads((out / "summary.json").read_text())
    assert stopped["stopped"] is True and json.loads(stdout)["stopped"] is True
    assert stopped["policy"]["max_share"] > 0 and stopped["records_routed_to_workers"] > 0

    # Resumed with --no-follow: it reads the files there are and closes the last windows. The job is
    # named another way (the file alone), which is the same job.
    resume = [*SPONGE, "run", str(EXAMPLE), "--input", str(inp), "--output", str(out), *policy, "--resume"]
    resume.append("--no-follow")
    done = subprocess.run(resume, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["resumed"] is True and resumed["stopped"] is False and resumed["job"] == "page_views"
    assert resumed["records_in"] == 100_000
    assert resumed["dead_letter"] == {"count": 2, "by_reason": {"field 'at'": 1, "field 'user'": 1}}
    assert (
        len([d for d in _decisions(out)]) > len(stopped["policy"])
        and (out / "_status" / "latest.json").is_file()
    )

    plain = run_query(
        RunConfig(
            query=f"{EXAMPLE}:job",
            generator=GeneratorConfig(seed=0, events=0),
            output=tmp_path / "plain",
            input=inp,
        )
    )
    assert plain["records_in"] == 100_000
    actual, without = read_results(out), read_results(tmp_path / "plain")
    assert diff_results(actual, without) is None, diff_results(actual, without)
    expected = _expected(staged)
    assert diff_results(actual.select(expected.column_names), expected) is None


def test_ctrl_c_in_a_terminal_stops_a_followed_run_once_its_epoch_commits(tmp_path: Path) -> None:
    """A terminal's Ctrl-C reaches the whole foreground process group: the driver, Spark's JVM and its
    Python workers. The run must still stop by its own handler (Spark installs one that cancels every
    job), after its epoch in flight, so `--resume` loses nothing."""
    inp, out = tmp_path / "in", tmp_path / "out"
    _example().write_views(str(inp), 2_000, files=2)
    cmd = [*SPONGE, "run", f"{EXAMPLE}:job", "--input", str(inp), "--output", str(out), "--follow"]
    proc = subprocess.Popen(
        cmd, stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    try:
        _wait_for("an epoch", lambda: _committed(out) >= 1, proc)
        os.killpg(proc.pid, signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, stderr[-2000:]
    assert "SIGINT: stopping once the epoch in flight commits" in stderr
    assert json.loads(stdout)["stopped"] is True and json.loads(stdout)["records_in"] == 2_000

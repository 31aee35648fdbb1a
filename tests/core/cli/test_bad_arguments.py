"""Every `sponge` command refuses a bad argument with one line that says what is wrong and what to do
(exit 2), before it starts anything.

The commands run in this process (`core.cli.main.main`, the same entry point as `.venv/bin/sponge`,
under typer's CliRunner streams). The work each command would do (a Spark query, a drill, the
simulator, a deployment) is replaced by a stub that fails the test, so a bad argument that is noticed
only after the work started is caught here, not on a user's machine minutes later.
`test_every_command_is_covered` keeps the list complete as commands are added.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from core.cli.main import app, main

pytestmark = pytest.mark.timeout(120)


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str


def sponge(*args: str) -> Outcome:
    """Run `sponge ARGS` in this process, as its console script does; its exit code and output."""
    with CliRunner().isolation() as (out, err, _):
        code = 0
        try:
            main(list(args))
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else 1
        sys.stdout.flush()  # the runner's streams buffer: what a command wrote by plain writes is in them
        sys.stderr.flush()
        return Outcome(code, out.getvalue().decode(), err.getvalue().decode())


def assert_one_line_error(result: Outcome, *needles: str) -> None:
    """Exit 2, nothing on stdout, and one `error: ... (hint)` line on stderr holding every needle."""
    assert result.code == 2, result
    assert "Traceback" not in result.stderr and result.stdout == ""
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("error: ") and line.endswith(")"), line  # the message, then its hint
    for needle in needles:
        assert needle in line, line


WORK = {
    "core.spark.runner": "run_query",
    "core.nexmark.reference": "write_reference",
    "core.nexmark.export": "write_events",
    "core.drill.drill": "run_drill",
    "core.drill.chaos": "run_schedule",
    "policy.sim.experiment": "simulate_query",
    "infra.deploy.stack": ("deploy", "destroy", "localstack_endpoint"),
    "infra.deploy.status": "status",
}


@pytest.fixture(autouse=True)
def no_work(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """What each command does once its arguments are accepted fails the test instead; and no stack
    deployed on this machine is seen (a run or drill reads the project's .sponge/ by default)."""
    import importlib

    monkeypatch.setattr("core.deployment.STACK_DIR", tmp_path / "no-stacks")

    for module, names in WORK.items():
        mod = importlib.import_module(module)
        for name in (names,) if isinstance(names, str) else names:

            def reached(*_a: object, _what: str = f"{module}.{name}", **_k: object) -> None:
                pytest.fail(f"{_what} ran: the bad argument was not refused before the work started")

            monkeypatch.setattr(mod, name, reached)
    yield


@pytest.fixture
def a_file(tmp_path: Path) -> Path:
    path = tmp_path / "a-file"
    path.write_text("not a directory\n")
    return path


# Each case: the arguments, then what the one line must name. `{file}`, `{missing}` and `{tmp}` stand for
# an existing file, a path that does not exist and an empty directory.
CASES: list[tuple[tuple[str, ...], tuple[str, ...]]] = [
    # the app itself
    (("bogus",), ("No such command 'bogus'", "sponge --help")),
    (("--bogus", "queries"), ("No such option: --bogus", "sponge --help")),
    # queries
    (("queries", "q5"), ("unexpected extra argument", "sponge queries --help")),
    # compile
    (("compile", "q42"), ("unknown query 'q42'", "sponge queries")),
    (("compile",), ("Missing argument 'JOB'", "sponge compile --help")),
    (("compile", "q5", "--jsn"), ("No such option: --jsn", "--json")),
    # reference
    (("reference", "nope", "-o", "{tmp}/out"), ("unknown query 'nope'",)),
    (("reference", "q5", "-o", "{tmp}/out", "--events", "-1"), ("--events", "sponge reference --help")),
    (("reference", "q5", "-o", "{file}"), ("--output", "is a file")),
    (("reference", "q5", "-o", "{tmp}/out", "--window-size", "10", "--window-slide", "3"), ("multiple",)),
    # events
    (("events", "-o", "{tmp}/out", "--rate", "0"), ("--rate", "sponge events --help")),
    (("events", "-o", "{file}"), ("--output", "is a file")),
    (("events", "-o", "{tmp}/out", "--seed", "-2"), ("--seed",)),
    # run
    (("run", "q42", "-o", "{tmp}/out"), ("unknown query 'q42'",)),
    (("run", "q1", "-o", "{tmp}/out", "--rate", "-5"), ("--rate", "sponge run --help")),
    (("run", "q1", "-o", "{file}"), ("--output", "is a file")),
    (
        ("run", "q1", "-o", "{tmp}/out", "--source", "kinesis", "--stream", "s", "--rate", "100"),
        ("--rate is for the other sources", "sponge produce --rate"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--input", "{missing}"), ("--input", "does not exist")),
    (("run", "q1", "-o", "{tmp}/out", "--input", "{file}"), ("--input", "is a file")),
    (("run", "q1", "-o", "{tmp}/out", "--master", "bogus"), ("not a Spark master URL", "local[N]")),
    (("run", "q1", "-o", "{tmp}/out", "--batch-events", "0"), ("--batch-events",)),
    (("run", "q1", "-o", "{tmp}/out", "--offload-share", "-0.5"), ("--offload-share",)),
    (
        ("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--target", "gcp"),
        ("unknown target 'gcp'",),
    ),
    (
        ("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--invocation-type", "Sometimes"),
        ("unknown Lambda invocation type", "Event"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--invocation-type", "RequestResponse"), ("needs --offload-share",)),
    (
        ("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--inject", "kill-worker:evry=2s"),
        ("kill-worker:evry=2s",),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--inject", "boom"), ("boom",)),
    (("run", "q1", "-o", "{tmp}/in", "--input", "{tmp}/in"), ("contains the input",)),
    (("run", "q1", "-o", "{tmp}/out", "--workers", "3"), ("--workers needs --offload-share",)),
    (("run", "q4", "-o", "{tmp}/out", "--handoff", "all-at-once"), ("--handoff needs --offload-share",)),
    (("run", "q4", "-o", "{tmp}/out", "--subscales", "2"), ("--subscales needs --offload-share",)),
    (("run", "q4", "-o", "{tmp}/out", "--offload-share", "0.5", "--subscales", "0"), ("--subscales",)),
    (
        ("run", "q4", "-o", "{tmp}/out", "--offload-share", "0.5", "--handoff", "eager"),
        ("unknown --handoff 'eager'", "lazy or progressive or all-at-once"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--target", "aws"), ("--target needs --offload-share",)),
    (("run", "q1", "-o", "{tmp}/out", "--chunk-timeout", "5"), ("--chunk-timeout needs --offload-share",)),
    (
        ("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--chunk-timeout", "0"),
        ("--chunk-timeout",),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--keep-warm", "60"), ("--keep-warm needs --offload-share",)),
    (
        ("run", "q1", "-o", "{tmp}/out", "--offload-share", "0.5", "--keep-warm", "-1"),
        ("--keep-warm must be 0 (off) or a positive number of seconds", "e.g. --keep-warm 240"),
    ),
    # run: the live policy
    (
        ("run", "q1", "-o", "{tmp}/out", "--rate", "1000", "--policy", "sponge", "--offload-share", "0.5"),
        ("--policy sponge decides the offloaded share", "drop --offload-share"),
    ),
    (
        ("run", "q1", "-o", "{tmp}/out", "--rate", "1000", "--policy", "auto"),
        ("unknown --policy 'auto'", "sponge"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--policy", "sponge"), ("without --rate", "--input DIR")),
    (
        ("run", "q1", "-o", "{tmp}/out", "--per-core-rate", "1000"),
        ("tunes the sponge policy", "--policy sponge"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--policy", "sponge", "--rate", "1000", "--rho", "0"), ("--rho",)),
    # run: memory
    (
        ("run", "q1", "-o", "{tmp}/out", "--driver-memory", "lots"),
        ("not a memory size", "--driver-memory 4g"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--driver-memory", "100m"), ("too small for Spark", "512m")),
    (("run", "q1", "-o", "{tmp}/out", "--driver-memory", "100000g"), ("of RAM", "lower them")),
    (("run", "q1", "-o", "{tmp}/out", "--executor-memory", "2g"), ("runs every task in the driver JVM",)),
    (
        ("run", "q1", "-o", "{tmp}/out", "--master", "local-cluster[2,1,1024]", "--executor-memory", "2g"),
        ("gives each worker 1024 MB", "--executor-memory"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--state-store", "memory"), ("unknown state store", "rocksdb or hdfs")),
    (("run", "q5", "-o", "{tmp}/out", "--state-store", "hdfs"), ("transformWithState", "drop --state-store")),
    (("run", "{example}:job", "-o", "{tmp}/out"), ("no --input was given", "DIR/<source>/*.jsonl")),
    (("run", "{tmp}/nope.py:job", "-o", "{tmp}/out", "-i", "{tmp}"), ("no job file", "file.py:job")),
    (("run", "{example}:jobs", "-o", "{tmp}/out", "-i", "{tmp}"), ("no Job named 'jobs'", "it defines job")),
    (
        ("run", "q1", "-o", "{tmp}/out", "--state-store", "hdfs", "--rocksdb-memory", "1g"),
        ("--rocksdb-memory", "drop --rocksdb-memory"),
    ),
    (("run", "q1", "-o", "{tmp}/out", "--rocksdb-memory", "1m"), ("too small", "--rocksdb-memory")),
    # drill
    (("drill", "--query", "q42"), ("unknown query 'q42'",)),
    (("drill", "--source", "kinesis"), ("a drill over Kinesis needs --rate", "--rate 300")),
    (("drill", "--stream", "s"), ("--stream names a Kinesis stream", "--source kinesis")),
    (("drill", "--pattern", "bogus"), ("unknown burst pattern 'bogus'", "sudden:2x:30s")),
    (("drill", "--pattern", "sudden:1x:30s"), ("factor above 1x",)),
    (("drill", "--pattern", "sudden:2x:100s", "--duration", "90"), ("does not fit in 90 s", "--duration")),
    (("drill", "--lead", "100", "--duration", "90"), ("does not fit",)),
    (("drill", "--compare", "sponge,bogus"), ("unknown policy 'bogus'",)),
    (("drill", "--compare", ""), ("no policy to run", "--compare")),
    (("drill", "--query", "q7", "--policy", "sfbase"), ("cannot run q7 live", "sponge simulate")),
    (("drill", "--target", "gcp"), ("unknown target 'gcp'",)),
    (("drill", "--target", "localstack"), ("no deployed stack for localstack", "sponge deploy")),
    (("drill", "--rate", "-1"), ("--rate", "sponge drill --help")),
    (("drill", "--duration", "5"), ("--duration",)),
    (("drill", "--workers", "0"), ("--workers",)),
    (("drill", "--vm-launch-delay", "601"), ("--vm-launch-delay",)),
    (("drill", "--report", "{file}"), ("--report", "is a file")),
    (("drill", "--duration", "60"), ("does not fit in 60 s", "--duration above 60 s")),
    (("drill", "--pattern", "sine:2x:20s", "--duration", "40"), ("does not fit in 40 s",)),
    (("drill", "--policy", "sponge", "--compare", "sponge,over"), ("--policy and --compare", "one of them")),
    (("drill", "--compare", "noscaling", "--workers", "2"), ("tunes the sponge policy", "drop --workers")),
    (("drill", "--vm-launch-delay", "10"), ("tunes the vmbase policy", "--vm-launch-delay")),
    (("drill", "--compare", "over", "--keep-warm", "60"), ("tunes the sponge policy", "drop --keep-warm")),
    (("drill", "--keep-warm", "nan"), ("--keep-warm must be 0 (off)", "e.g. --keep-warm 240")),
    # drill: memory
    (("drill", "--executor-memory", "64g"), ("2 x --executor-memory 64g", "more than this machine")),
    (("drill", "--query", "q5", "--state-store", "hdfs"), ("transformWithState", "drop --state-store hdfs")),
    (("drill", "--driver-memory", "2 GB please"), ("not a memory size",)),
    (("drill", "--driver-memory", "100000g"), ("of RAM",)),
    # drill-matrix
    (("drill-matrix", "--queries", "q1,q42"), ("unknown query 'q42'", "q0, q1, q2")),
    (("drill-matrix", "--patterns", "spiky"), ("unknown burst pattern 'spiky'", "sudden, sine, gradual")),
    (("drill-matrix", "--patterns", "sudden,sudden:2x:5s"), ("two sudden bursts",)),
    (("drill-matrix", "--compare", "noscaling,over"), ("compares sponge", "add sponge to --compare")),
    (("drill-matrix", "--compare", "sponge,bogus"), ("unknown policy 'bogus'",)),
    (("drill-matrix", "--quick", "--patterns", "sine"), ("--quick sets --patterns", "drop --patterns")),
    (("drill-matrix", "--duration", "31"), ("no time for a burst", "--duration")),
    (("drill-matrix", "--report", "{file}"), ("--report", "is a file")),
    (("drill-matrix", "--target", "localstack"), ("no deployed stack for localstack", "sponge deploy")),
    # simulate
    (("simulate", "-q", "q42"), ("unknown query 'q42' for the simulator",)),
    (("simulate", "-q", "q1,q42"), ("unknown query 'q42'",)),
    (("simulate", "-p", "bogus"), ("unknown burst pattern",)),
    (("simulate", "-p", "sudden:5x:500s", "--duration", "100"), ("does not fit",)),
    (("simulate", "--compare", "sponge,bogus"), ("unknown policies bogus",)),
    (("simulate", "--compare", ","), ("--compare names no policy",)),
    (("simulate", "--duration", "5"), ("--duration",)),
    (("simulate", "--rho", "0"), ("--rho",)),
    (("simulate", "--report", "{file}"), ("--report", "is a file")),
    # chaos
    (("chaos", "q42"), ("unknown query 'q42'",)),
    (("chaos", "q5", "--schedules", "0"), ("--schedules",)),
    (("chaos", "q5", "--offload-share", "1.5"), ("--offload-share",)),
    (("chaos", "q5", "--workdir", "{file}"), ("--workdir", "is a file")),
    # deploy
    (("deploy", "--target", "gcp"), ("unknown deploy target 'gcp'", "localstack or aws")),
    (("deploy", "--target", "aws", "--parameter", "WorkerTimeout"), ("is not KEY=VALUE",)),
    (("deploy", "--target", "aws", "--stack", "1bad"), ("bad stack name",)),
    (("deploy", "--target", "aws", "--artifact-bucket", "Not_A_Bucket"), ("bad artifact bucket name",)),
    (("deploy", "--target", "aws", "--code-dir", "{missing}"), ("--code-dir", "does not exist")),
    (("deploy", "--target", "localstack", "--endpoint-url", "localhost"), ("not an http(s) URL",)),
    # destroy
    (("destroy", "--target", "gcp"), ("unknown deploy target 'gcp'",)),
    (("destroy", "--target", "localstack", "--stack-dir", "{tmp}"), ("no deployed stack", "sponge deploy")),
    # status
    (("status", "--target", "gcp"), ("unknown deploy target 'gcp'",)),
    (("status", "--target", "aws", "--stack-dir", "{tmp}"), ("no deployed stack for aws", "sponge deploy")),
    (("status", "--window", "0"), ("--window", "sponge status --help")),
    (("status", "--run", "{tmp}"), ("is not a sponge run", "_sponge_run.json")),
    (("status", "--run", "{missing}"), ("is not a directory", "--output")),
    (("status", "--run", "{tmp}", "--target", "aws"), ("--run shows a run", "one of them")),
    (("status", "--watch"), ("--watch follows a run", "--run DIR")),
    # feed
    (("feed", "q5", "-o", "{tmp}/out"), ("q5 is a NEXMark query", "FILE.py:NAME")),
    (("feed", "{example}", "-o", "{tmp}/out", "--files", "0"), ("--files must be at least 1",)),
    (("feed", "{tmp}/nope.py", "-o", "{tmp}/out"), ("nope.py",)),
    # produce
    (
        ("produce", "--stream", "s", "--endpoint-url", "http://127.0.0.1:1"),
        ("cannot reach Kinesis", "LocalStack"),
    ),
    (("produce", "--stream", "s", "--shards", "0"), ("--shards", "sponge produce --help")),
]


EXAMPLE = str(Path(__file__).resolve().parents[3] / "examples" / "page_views.py")


def _fill(args: tuple[str, ...], tmp: Path, a_file: Path) -> list[str]:
    names = {"tmp": str(tmp), "file": str(a_file), "missing": str(tmp / "does-not-exist"), "example": EXAMPLE}
    return [a.format(**names) for a in args]


@pytest.mark.parametrize(("args", "needles"), CASES, ids=[" ".join(a) or "-" for a, _ in CASES])
def test_a_bad_argument_is_one_line_with_a_hint(
    args: tuple[str, ...],
    needles: tuple[str, ...],
    tmp_path: Path,
    a_file: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(tmp_path)  # a default path (runs/drill, .sponge) never lands in the project
    tmp = tmp_path / "work"
    tmp.mkdir()
    (tmp / "in").mkdir()
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    assert_one_line_error(sponge(*_fill(args, tmp, a_file)), *needles)
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before  # nothing was written
    assert a_file.read_text() == "not a directory\n"


def test_every_command_is_covered() -> None:
    """Each command of the app (every group registered through `sponge.commands`) has a case above."""
    commands = {c.name for c in typer.main.get_command(app).commands.values()}  # type: ignore[attr-defined]
    covered = {args[0] for args, _ in CASES if not args[0].startswith("-")} - {"bogus"}
    assert commands == covered


def test_a_good_argument_list_still_runs() -> None:
    """The in-process runner runs a command to its end: the cases above fail for their argument only."""
    result = sponge("compile", "q5", "--json")
    assert result.code == 0 and result.stderr == ""
    assert json.loads(result.stdout)["query"] == "q5"

"""Mutation check: plant bugs the suite exists to catch, one at a time, and see that tests fail.

Why: a green suite only says something if it turns red when the product is wrong. The bugs planted
here are the ones that break exactly-once, which the offload path exists to keep: a chunk of the
workers' share lost, a worker partial merged twice, a null compared differently on one backend, a
redispatched chunk's late result accepted beside the redispatch's own, a duplicated worker result
taken for another chunk (broken dedup: the chaos bench's checker must see it), the routing log's last
line lost. Each is a precise textual edit whose original snippet must occur exactly once, so when the code
moves the check fails loudly instead of mutating nothing. The broken variants live only here, never
as flags in product code.

Every run works on a copy: the working tree's files (tracked ones, plus untracked ones git does not
ignore, so tests being written are picked up) and the generated gRPC modules go into a fresh temp
directory per mutation, `.venv` and `.localstack-venv` are symlinked in, and pytest runs there with
cwd and PYTHONPATH set to the copy, so the test process and everything it starts (the agent, workers,
Spark's Python workers) import the mutated code and never the user's checkout. Afterwards the tests
that failed are run once more on an unmutated copy: one that fails there too (work in progress, a
flake under load) does not count as catching.

    python -m tests.mutation_check            # every mutation against its test selection
    python -m tests.mutation_check --list     # the mutations and their selections
    python -m tests.mutation_check --only 3   # one mutation
    python -m tests.mutation_check --full     # the whole suite per mutation (slow)

Exit status: 0 every mutation was caught, 1 some mutation survived, 2 the check itself could not
judge (a mutation that no longer applies, a selection that selects nothing, a pytest run that did not
finish).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
VENVS = (".venv", ".localstack-venv")
GENERATED = ("core/wire/_generated",)  # built at set-up, ignored by git, imported by the tests
OFFLOAD_RUN = "tests/core/spark/test_offload_run.py"
OFFLOAD_FAULTS = "tests/core/spark/test_offload_faults.py"
# The end-to-end runs (Spark, the agent and workers, checked against the DuckDB reference), picked by
# -k so the selection survives new parametrizations: ids are <query>-<seed>-<share>.
E2E = f"{OFFLOAD_RUN} -k test_offloaded_output_equals_reference and "
PLUGIN = "_mutation_check_plugin"
PLUGIN_SOURCE = '''"""Written by tests/mutation_check.py into its copy: every test's outcome, as JSON."""
import json
import os

_outcomes = {}
_RANK = {"passed": 0, "skipped": 1, "failed": 2}


def _note(nodeid, outcome):
    if _RANK.get(outcome, 2) >= _RANK.get(_outcomes.get(nodeid, "passed"), 0):
        _outcomes[nodeid] = outcome


def pytest_runtest_logreport(report):
    if report.failed or report.when == "call" or report.skipped:
        _note(report.nodeid, report.outcome)


def pytest_collectreport(report):
    if report.failed:
        _note(report.nodeid or "<collection>", "failed")


def pytest_sessionfinish(session, exitstatus):
    with open(os.environ["MUTATION_CHECK_OUTCOMES"], "w") as f:
        json.dump(_outcomes, f, indent=1, sort_keys=True)
'''


@dataclass(frozen=True)
class Mutation:
    """One planted bug: `old` (exactly once in `path`) becomes `new`; `tests` should catch it.

    A test entry is a path, a node id, or `path -k EXPRESSION` (resolved to node ids in the copy);
    each must select something. `if_present` are globs of test files added when they exist (tests
    other engineers are writing for the same kind of bug)."""

    name: str
    path: str
    old: str
    new: str
    what: str
    tests: tuple[str, ...]
    if_present: tuple[str, ...] = field(default=())


MUTATIONS: tuple[Mutation, ...] = (
    Mutation(
        name="drop-offloaded-chunk",
        path="router/source_router.py",
        old="        return list(pool.map(one, range(len(chunks))))\n",
        new="        return list(pool.map(one, range(1, len(chunks))))  # chunk 0 is never sent\n",
        what="the routed read of a task with several chunks never sends its first chunk to the agent",
        tests=(
            "tests/router/test_source_router.py",
            "tests/core/test_direct_sink.py",
            f"{E2E}q5-1-0.3",
            f"{OFFLOAD_FAULTS} -k q2-",  # chunk_rows=500: tasks of several chunks, direct sink
        ),
    ),
    Mutation(
        name="double-apply-partial",
        path="core/spark/lower.py",
        old="    both = mine.unionByName(partial_form.worker_partials(workers, op, mine))\n",
        new=(
            "    theirs = partial_form.worker_partials(workers, op, mine)\n"
            '    theirs = theirs.withColumn("_twice", F.explode(F.array(F.lit(1), F.lit(2))))'
            '.drop("_twice")\n'
            "    both = mine.unionByName(theirs)  # every worker partial row is merged twice\n"
        ),
        what="the merge operator folds each partial row the workers returned into the VM's state twice",
        tests=(
            "tests/merge/spark/test_column_fold.py",
            f"{E2E}(q5-1-0.3 or q7-1-0.3)",
        ),
        if_present=("tests/core/spark/test_lowering_merge*.py", "tests/merge/spark/test_merge*.py"),
    ),
    Mutation(
        name="null-not-equal-polars",
        path="core/expr_polars.py",
        old="        if e.op in PYTHON_OPERATORS:\n",
        new=(
            '        if e.op == "!=":\n'
            "            return a.ne_missing(b)  # null != x is true here; SQL and Spark say unknown\n"
            "        if e.op in PYTHON_OPERATORS:\n"
        ),
        what="on the workers' backend (polars), null != x is true instead of null, so a filter keeps the row",
        tests=(
            "tests/core/test_expr.py",
            "tests/lambda_worker/test_transient.py",
            "tests/lambda_worker/test_program.py",
        ),
        if_present=(
            "tests/core/spark/test_expr_parity*.py",
            "tests/core/test_expr_*.py",
            "tests/lambda_worker/test_*null*.py",
        ),
    ),
    Mutation(
        name="accept-late-redispatched-result",
        path="router/dispatcher.py",
        old=(
            "        if link is None or task is None or link.current is not task:\n"
            "            self.counters.add(stats.LATE_RESULTS)\n"
        ),
        new=(
            "        if task is not None and (link is None or link.current is not task):\n"
            "            return link, task  # type: ignore[return-value]  # a late result, accepted as well\n"
            "        if link is None or task is None or link.current is not task:\n"
            "            self.counters.add(stats.LATE_RESULTS)\n"
        ),
        what=(
            "the dispatcher accepts the late result of a chunk's first dispatch while the chunk is with "
            "another worker, and then the redispatch's result too"
        ),
        tests=(
            "tests/router/test_dispatcher.py",
            "tests/router/test_result_cache.py",
            "tests/router/test_agent.py",
            "tests/router/test_agent_embedded.py",
            "tests/router/test_agent_faults.py",
        ),
        if_present=("tests/router/test_*redispatch*.py", "tests/router/test_*dedup*.py"),
    ),
    Mutation(
        name="result-matched-by-worker",
        path="router/dispatcher.py",
        old=(
            "        task = self._inflight.get(chunk_id)\n"
            "        if link is None or task is None or link.current is not task:\n"
            "            self.counters.add(stats.LATE_RESULTS)\n"
            "            return None\n"
            "        del self._inflight[chunk_id]\n"
        ),
        new=(
            "        task = link.current if link is not None else None  # whichever chunk the result names\n"
            "        if link is None or task is None or link.current is not task:\n"
            "            self.counters.add(stats.LATE_RESULTS)\n"
            "            return None\n"
            "        del self._inflight[task.chunk_id]\n"
        ),
        what=(
            "the dispatcher's dedup of results is broken: a result is taken for the chunk its worker holds "
            "now, whichever chunk it names, so a duplicated result answers the worker's next chunk"
        ),
        tests=("tests/bench/test_chaos.py -k hundred",),
    ),
    Mutation(
        name="routing-log-loses-last-line",
        path="router/routing_log.py",
        old='        for number, line in enumerate(data.split(b"\\n")[:-1], start=1):\n',
        new='        for number, line in enumerate(data.split(b"\\n")[:-2], start=1):  # last line lost\n',
        what="reading the routing log drops its last complete line (as well as a torn one)",
        tests=(
            "tests/router/test_routing_log.py",
            f"{E2E}q5-1-0.3",
        ),
        if_present=("tests/router/test_routing_log?*.py",),
    ),
)


class CheckError(Exception):
    """The check cannot judge (a mutation that no longer applies, a copy that imports the wrong code)."""


# ---- the copy ---------------------------------------------------------------------------------------


def _working_tree_files() -> list[str]:
    out = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout
    return sorted({p for p in out.decode().split("\0") if p})


def make_copy(parent: Path, name: str) -> Path:
    """A copy of the working tree under `parent`/`name`, with the virtualenvs linked in."""
    dest = parent / name
    dest.mkdir()
    for rel in _working_tree_files():
        src = ROOT / rel
        if not src.exists() and not src.is_symlink():
            continue  # deleted in the working tree
        target = dest / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, target, follow_symlinks=False)
    for rel in GENERATED:
        if (ROOT / rel).is_dir():
            shutil.copytree(ROOT / rel, dest / rel, dirs_exist_ok=True)
    for venv in VENVS:
        if (ROOT / venv).exists():
            (dest / venv).symlink_to(ROOT / venv)
    (dest / f"{PLUGIN}.py").write_text(PLUGIN_SOURCE)
    build = [_python(dest), "-m", "core.wire.build_proto"]
    if subprocess.run([*build, "--check"], cwd=dest, capture_output=True, check=False).returncode != 0:
        subprocess.run(build, cwd=dest, capture_output=True, check=True)  # agent.proto changed since set-up
    return dest


def _env(copy: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(copy), env.get("PYTHONPATH", "")) if p)
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _python(copy: Path) -> str:
    venv_python = copy / ".venv" / "bin" / "python"
    return str(venv_python) if venv_python.exists() else sys.executable


def check_imports(copy: Path) -> str:
    """Where `core` is imported from in the copy, from its own directory and from elsewhere (as Spark's
    Python workers and the agent's processes import it); CheckError unless both are the copy."""
    code = "import core, merge, router; print(core.__file__); print(merge.__file__); print(router.__file__)"
    seen = []
    for cwd in (copy, Path("/")):
        out = subprocess.run(
            [_python(copy), "-c", code], cwd=cwd, env=_env(copy), capture_output=True, text=True, check=True
        ).stdout.split()
        bad = [f for f in out if not Path(f).resolve().is_relative_to(copy.resolve())]
        if bad:
            raise CheckError(f"the copy at {copy} imports {bad[0]} (from cwd {cwd}), not its own code")
        seen.append(out[0])
    return seen[0]


def apply(mutation: Mutation, copy: Path) -> None:
    """Plant `mutation` in `copy`; CheckError when its snippet is not there exactly once, or when the
    mutated file is not lint-clean (a lint test would 'catch' it for the wrong reason)."""
    path = copy / mutation.path
    text = path.read_text()
    count = text.count(mutation.old)
    if count != 1:
        raise CheckError(
            f"{mutation.name}: the snippet to mutate occurs {count} times in {mutation.path} (expected 1); "
            "the code moved: update tests/mutation_check.py"
        )
    path.write_text(text.replace(mutation.old, mutation.new))
    lint = subprocess.run(
        [_python(copy), "-m", "ruff", "check", "--quiet", mutation.path],
        cwd=copy,
        capture_output=True,
        text=True,
        check=False,
    )
    if lint.returncode != 0:
        raise CheckError(f"{mutation.name}: the mutated {mutation.path} is not ruff-clean:\n{lint.stdout}")


# ---- running tests ----------------------------------------------------------------------------------


def _collect(copy: Path, path: str, expression: str) -> list[str]:
    """The node ids `pytest path -k expression` selects in `copy`."""
    out = subprocess.run(
        [
            _python(copy),
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            path,
            "-k",
            expression,
        ],
        cwd=copy,
        env=_env(copy),
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return [line.strip() for line in out.splitlines() if "::" in line and not line.startswith(" ")]


def selection(mutation: Mutation, copy: Path, full: bool) -> list[str]:
    """The pytest arguments for `mutation` in `copy`: its tests and whichever optional files exist."""
    if full:
        return []
    out: list[str] = []
    for test in mutation.tests:
        path, _, expression = test.partition(" -k ")
        if not (copy / path.split("::")[0]).exists():
            raise CheckError(f"{mutation.name}: {path} is gone: update tests/mutation_check.py")
        ids = _collect(copy, path, expression) if expression else [path]
        if not ids:
            raise CheckError(f"{mutation.name}: {test!r} selects no test: update tests/mutation_check.py")
        out += [i for i in ids if i not in out]
    for pattern in mutation.if_present:
        out += [
            rel for rel in (str(p.relative_to(copy)) for p in sorted(copy.glob(pattern))) if rel not in out
        ]
    return out


@dataclass
class RunResult:
    returncode: int
    outcomes: dict[str, str]
    seconds: float
    log: Path

    @property
    def failed(self) -> list[str]:
        return sorted(t for t, o in self.outcomes.items() if o == "failed")


_PROGRESS = re.compile(r"^(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def run_pytest(copy: Path, args: Sequence[str], label: str, log_dir: Path) -> RunResult:
    """Run pytest in `copy` on `args`, printing each finished test as it goes."""
    outcomes_file = log_dir / f"{label}.outcomes.json"
    log = log_dir / f"{label}.log"
    env = _env(copy) | {"MUTATION_CHECK_OUTCOMES": str(outcomes_file)}
    cmd = [
        _python(copy), "-m", "pytest", "-v", "-p", PLUGIN, "-p", "no:cacheprovider",
        "--continue-on-collection-errors", f"--basetemp={copy / '.pytest-tmp'}", *args,
    ]  # fmt: skip
    start = time.monotonic()
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=copy, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode(errors="replace")
            out.write(line)
            m = _PROGRESS.match(line)
            if m:
                print(f"    {_clock(time.monotonic() - start)} {m[2]:<7} {m[1]}", flush=True)
        returncode = proc.wait()
    outcomes = json.loads(outcomes_file.read_text()) if outcomes_file.exists() else {}
    return RunResult(returncode, outcomes, time.monotonic() - start, log)


def _clock(seconds: float) -> str:
    return f"{int(seconds) // 60:2d}:{int(seconds) % 60:02d}"


# ---- the check --------------------------------------------------------------------------------------


@dataclass
class Verdict:
    mutation: Mutation
    status: str  # caught, survived, error
    caught_by: list[str]  # failing tests that pass on an unmutated copy
    ran: int  # tests that ran
    seconds: float
    already_red: list[str] = field(default_factory=list)  # failing without the mutation too
    note: str = ""


def judge(mutation: Mutation, result: RunResult, red_anyway: set[str]) -> Verdict:
    caught_by = [t for t in result.failed if t not in red_anyway]
    red = [t for t in result.failed if t in red_anyway]
    ran = len(result.outcomes)
    if caught_by:
        return Verdict(mutation, "caught", caught_by, ran, result.seconds, red)
    if result.returncode in (0, 1, 5):  # passed, only tests red anyway, or none ran
        note = "no test selected" if result.returncode == 5 else ""
        return Verdict(mutation, "survived", [], ran, result.seconds, red, note)
    note = f"pytest exited {result.returncode}; see {result.log}"
    return Verdict(mutation, "error", [], ran, result.seconds, red, note)


SHOWN = 8  # failing tests listed per mutation in the table; the logs have them all


def _print_table(verdicts: list[Verdict], logs: Path) -> None:
    print("\n" + "=" * 110)
    print(f"{'#':>2}  {'mutation':<33} {'result':<8} {'time':>5} {'failed/ran':>10}  caught by")
    print("-" * 110)
    for v in verdicts:
        n = MUTATIONS.index(v.mutation) + 1
        lines = v.caught_by[:SHOWN] or [v.note or "-"]
        if len(v.caught_by) > SHOWN:
            lines.append(f"... {len(v.caught_by) - SHOWN} more: {logs}/mutation-{n}.outcomes.json")
        if v.already_red:
            lines.append(f"(not counted, red without the mutation too: {', '.join(v.already_red)})")
        score = f"{len(v.caught_by)}/{v.ran}"
        print(f"{n:>2}  {v.mutation.name:<33} {v.status:<8} {_clock(v.seconds):>5} {score:>10}  {lines[0]}")
        for line in lines[1:]:
            print(f"{'':>65}{line}")
    print("=" * 110)


def _mutate_and_run(m: Mutation, full: bool, work: Path, logs: Path, keep: bool) -> RunResult:
    n = MUTATIONS.index(m) + 1
    copy = make_copy(work, f"mutation-{n}")
    where = check_imports(copy)
    apply(m, copy)
    args = selection(m, copy, full)
    print(f"\nmutation {n}/{len(MUTATIONS)} {m.name}: {m.what}")
    print(f"  {m.path} mutated in {copy} (core imported from {where})")
    print(f"  running: {' '.join(args) or 'every test'}", flush=True)
    result = run_pytest(copy, args, f"mutation-{n}", logs)
    print(
        f"  {m.name}: {len(result.failed)} of {len(result.outcomes)} tests failed in {_clock(result.seconds)}"
    )
    if not keep:
        shutil.rmtree(copy)
    return result


def _confirm(failed: list[str], work: Path, logs: Path, keep: bool) -> set[str]:
    """Run the tests that failed under some mutation on an unmutated copy; those that fail there too.

    Why after, and only those: a test red without any mutation (work in progress, a flake under load)
    proves nothing, and re-running only the failures costs far less than a baseline of every selection.
    """
    if not failed:
        return set()
    copy = make_copy(work, "unmutated")
    print(f"\nconfirming on an unmutated copy ({copy}): {len(failed)} tests that failed under a mutation")
    result = run_pytest(copy, failed, "unmutated", logs)
    red = set(result.failed)
    if result.returncode not in (0, 1):
        red.add("<unmutated run did not finish>")
        print(f"  pytest exited {result.returncode}; see {result.log}")
    print(f"  {len(red)} of them fail without a mutation too: they do not count as catching")
    if not keep:
        shutil.rmtree(copy)
    return red


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.mutation_check", description=__doc__.split(".")[0])
    parser.add_argument("--list", action="store_true", help="list the mutations and their test selections")
    parser.add_argument("--only", type=int, action="append", metavar="N", help="run mutation N (repeatable)")
    parser.add_argument("--full", action="store_true", help="run the whole suite per mutation")
    parser.add_argument(
        "--no-confirm", action="store_true", help="skip re-running the failed tests on an unmutated copy"
    )
    parser.add_argument("--keep", action="store_true", help="keep the copies as well as the logs")
    opts = parser.parse_args(argv)

    chosen = list(MUTATIONS)
    if opts.only:
        bad = [n for n in opts.only if not 1 <= n <= len(MUTATIONS)]
        if bad:
            parser.error(f"--only takes 1..{len(MUTATIONS)}, got {bad[0]}")
        chosen = [MUTATIONS[n - 1] for n in sorted(set(opts.only))]
    if opts.list:
        for i, m in enumerate(MUTATIONS, 1):
            print(f"{i}. {m.name}  ({m.path})\n   {m.what}")
            for t in (*m.tests, *(f"{g}  (when present)" for g in m.if_present)):
                print(f"     {t}")
        return 0

    work = Path(tempfile.mkdtemp(prefix="sponge-mutation-check-"))
    logs = work / "logs"
    logs.mkdir()
    started = time.monotonic()
    results: list[tuple[Mutation, RunResult]] = []
    try:
        print(f"copies of {ROOT} go under {work}", flush=True)
        for m in chosen:
            results.append((m, _mutate_and_run(m, opts.full, work, logs, opts.keep)))
            print(f"  [{_clock(time.monotonic() - started)} so far]", flush=True)
        failed = sorted({t for _, r in results for t in r.failed})
        red = set() if opts.no_confirm else _confirm(failed, work, logs, opts.keep)
    except CheckError as e:
        print(f"\nmutation check error: {e}", file=sys.stderr)
        return 2
    finally:
        for copy in (c for c in work.iterdir() if c != logs and not opts.keep):
            shutil.rmtree(copy, ignore_errors=True)  # left behind by an error or an interrupt
    verdicts = [judge(m, r, red) for m, r in results]
    _print_table(verdicts, logs)
    survived = [v.mutation.name for v in verdicts if v.status == "survived"]
    errors = [v.mutation.name for v in verdicts if v.status == "error"]
    print(f"total {_clock(time.monotonic() - started)}; pytest logs in {logs}")
    if survived:
        print(f"SURVIVED: {', '.join(survived)}: the suite misses these bugs")
    if errors:
        print(f"NOT JUDGED: {', '.join(errors)}: pytest did not finish normally (see the log)")
    if "<unmutated run did not finish>" in red:
        print("NOT JUDGED: the confirming run on the unmutated copy did not finish (see its log)")
    return 1 if survived else 2 if errors or "<unmutated run did not finish>" in red else 0


if __name__ == "__main__":
    sys.exit(main())

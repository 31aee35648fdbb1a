"""`sponge chaos` on Spark: a random fault schedule, its killed driver resumed, the output equal to the
reference; and the schedule of a seed, which the replay command depends on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from core.drill.chaos import SPONGE, ChaosRun, resumed, schedule
from core.fault_spec import DRIVER_KILL, parse_all

RUN = ChaosRun("q8", 4_000, 1_000, 0.5, 2)  # four epochs: a schedule takes about half a minute
SEED = 9  # a driver kill (resumed) and a stalled worker; the other kinds are the in-process schedules' of
# tests/core/spark/test_offload_faults.py, and task failures tests/core/spark/test_cli_run.py's


def test_a_seed_draws_the_same_schedule_and_resumed_runs_drop_counted_faults(tmp_path: Path) -> None:
    assert schedule(RUN, 11) == schedule(RUN, 11)
    faults = schedule(RUN, SEED)
    assert DRIVER_KILL in {f.kind for f in faults}
    drawn = ["driver-kill:after-epoch=2", "kill-worker:after-chunks=1", "throttle:share=0.2"]
    kept = resumed(parse_all(drawn))
    assert [f.text() for f in kept] == ["throttle:share=0.2"]
    argv = RUN.argv(tmp_path, kept, resume=True)
    assert argv[: len(SPONGE)] == list(SPONGE) and argv[-1] == "--resume"
    assert RUN.replay().format(seed=3).startswith("sponge chaos q8 --schedules 1 --seed 3 ")


@pytest.mark.slow
@pytest.mark.spark
@pytest.mark.timeout(900)
def test_a_spark_schedule_with_a_driver_kill_equals_the_reference(tmp_path: Path) -> None:
    sizes = ["--events", str(RUN.events), "--batch-events", str(RUN.batch_events)]
    argv = [*SPONGE, "chaos", "q8", *sizes, "--schedules", "1", "--seed", str(SEED)]
    argv += ["--workdir", str(tmp_path)]
    done = subprocess.run([*argv, "--json"], capture_output=True, text=True, timeout=850)
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["schedules"] == 1
    figures = {k: report[k] for k in ("failed", "lost", "duplicated", "unexpected")}
    assert figures == dict.fromkeys(figures, 0), (report["failing"], done.stderr[-3000:])
    assert done.returncode == 0
    assert report["fault_mix"][DRIVER_KILL] == 1
    assert done.stderr.count("resuming from its checkpoint") == 1
    assert not list(tmp_path.glob("seed-*"))  # a passing schedule's run is removed

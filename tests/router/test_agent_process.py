"""The launcher gives up on an agent that is not ready in time, and says why.

Stand-ins (tiny `python -c` scripts) take the agent's place where it has to misbehave: silent and
never listening, exiting at once, or announcing a port it never serves. The real agent is started
where its own output is under test.
"""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from core.errors import ConfigError, SpongeError
from router.agent_process import AgentProcess, AgentProcessConfig, free_port, write_secret

pytestmark = pytest.mark.timeout(60)

# Bounded waits, the point of these tests: the launcher gives up at its deadline, and not much later.
DEADLINE_S = 1.0  # for a stand-in that never gets ready: nothing has to happen before the deadline
READY_DEADLINE_S = 2.0  # for one that prints its ready line first: >= 5x a bare Python start-up, loaded
MARGIN_S = 5.0  # the launcher's own work after the deadline (kill, reap) on a loaded machine
EARLY_EXIT_DEADLINE_S = 60.0  # for one that exits: the launcher must not wait for the deadline


PID = "open(sys.argv[1], 'w').write(str(os.getpid()))\n"
"""A stand-in's first line: it writes its pid where the test can check that it is gone."""


@dataclass(frozen=True)
class StandInConfig(AgentProcessConfig):
    """An agent process config whose command line is a stand-in script instead of the agent."""

    script: str = ""

    def argv(self) -> list[str]:
        pid_file = self.secret_file.parent / "stand-in.pid"
        return [sys.executable, "-c", "import os, sys, time\n" + PID + self.script, str(pid_file)]


def _stand_in(tmp_path: Path, script: str, deadline_s: float = DEADLINE_S, **kwargs: Any) -> StandInConfig:
    return StandInConfig(
        secret_file=tmp_path / "secret", max_workers=0, start_timeout_s=deadline_s, script=script, **kwargs
    )


def _gone(pid_file: Path) -> bool:
    """True when the stand-in that wrote `pid_file` no longer exists (killed and reaped)."""
    pid = int(pid_file.read_text())
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def _start_fails(config: AgentProcessConfig) -> tuple[SpongeError, float]:
    agent = AgentProcess(config)
    started = time.monotonic()
    with pytest.raises(SpongeError) as info:
        agent.start()
    return info.value, time.monotonic() - started


def test_a_silent_agent_that_never_listens_is_killed_at_the_deadline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = _stand_in(tmp_path, "time.sleep(3600)\n")
    error, took = _start_fails(config)
    assert DEADLINE_S <= took < DEADLINE_S + MARGIN_S
    assert f"not ready within {DEADLINE_S:g} s" in error.message and "printed no ready line" in error.message
    assert "start_timeout_s" in error.hint
    assert _gone(tmp_path / "stand-in.pid")


def test_an_agent_that_announces_a_port_it_never_serves_is_killed_at_the_deadline(tmp_path) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    ready = json.dumps({"event": "listening", "port": port})
    script = f"print({ready!r}, flush=True)\ntime.sleep(3600)\n"
    config = _stand_in(tmp_path, script, deadline_s=READY_DEADLINE_S, port=port)
    error, took = _start_fails(config)
    assert READY_DEADLINE_S <= took < READY_DEADLINE_S + MARGIN_S
    assert f"reported port {port} but did not serve gRPC" in error.message
    assert _gone(tmp_path / "stand-in.pid")


def test_an_agent_that_exits_early_is_reported_with_its_status_and_stderr(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "run" / "workers.log"
    script = "print('no secret here', file=sys.stderr)\nsys.exit(3)\n"
    config = _stand_in(tmp_path, script, deadline_s=EARLY_EXIT_DEADLINE_S, log_path=log)
    error, took = _start_fails(config)
    assert took < EARLY_EXIT_DEADLINE_S  # no need to wait for the deadline: it is gone
    assert "exited with status 3" in error.message and "no secret here" in error.message
    assert str(log.with_suffix(".agent.log")) in error.hint


def test_the_start_deadline_must_be_positive(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ConfigError, match="start_timeout_s"):
        AgentProcessConfig(secret_file=tmp_path / "secret", max_workers=1, start_timeout_s=0)


@pytest.mark.slow  # the agent as its own process
def test_the_real_agent_starts_logs_with_time_and_level_and_stops(tmp_path) -> None:  # type: ignore[no-untyped-def]
    log = tmp_path / "workers.log"
    config = AgentProcessConfig(
        secret_file=write_secret(tmp_path / "secret"), max_workers=1, log_path=log, start_timeout_s=30
    )
    agent = AgentProcess(config)
    agent.start()
    assert agent.stop()["chunks_done"] == 0
    lines = log.with_suffix(".agent.log").read_text().splitlines()
    serving = next(line for line in lines if f"serving on {agent.address}" in line)
    assert " INFO router.agent.cli: " in serving and serving[:4].isdigit()  # time first, then the level


@pytest.mark.slow  # the agent as its own process
def test_a_real_agent_that_refuses_its_flags_is_reported_in_its_own_words(tmp_path) -> None:  # type: ignore[no-untyped-def]
    weak = tmp_path / "secret"
    weak.write_text("short")
    error, _ = _start_fails(AgentProcessConfig(secret_file=weak, max_workers=1, start_timeout_s=30))
    assert "exited with status 2" in error.message and "at least 16 bytes" in error.message


DRIVER = """
import os, signal, sys
from pathlib import Path
from router.agent_process import AgentProcess, AgentProcessConfig, write_secret
work = Path(sys.argv[1])
config = AgentProcessConfig(secret_file=write_secret(work / "secret"), max_workers=1, prewarm=1,
                            log_path=work / "workers.log", start_timeout_s=30)
agent = AgentProcess(config)
agent.start()
assert agent.wait_warm(1, 30)
print(agent.pid, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


@pytest.mark.slow  # the agent and a warm worker as their own processes
def test_a_driver_killed_outright_takes_its_agent_and_workers_along(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import subprocess

    from core.cli.main import __file__ as cli_file

    root = Path(cli_file).resolve().parents[2]
    driver = subprocess.run(
        [sys.executable, "-c", DRIVER, str(tmp_path)], capture_output=True, text=True, cwd=root, timeout=60
    )
    assert driver.returncode == -9, driver.stderr[-2000:]
    group = int(driver.stdout.split()[-1])  # the agent's pid, its process group's id
    deadline = time.monotonic() + 30  # a graceful stop: the fleet's workers first
    while time.monotonic() < deadline:
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    pytest.fail(f"the agent's process group {group} outlived its driver by 30 s")


@pytest.mark.slow  # the agent as its own process
def test_an_agent_killed_outright_is_started_again_and_its_callers_go_on(tmp_path) -> None:  # type: ignore[no-untyped-def]
    import signal

    import pyarrow as pa

    from router.client import AgentClient
    from tests.router.conftest import Q5, bids, sorted_rows

    config = AgentProcessConfig(
        secret_file=write_secret(tmp_path / "secret"),
        max_workers=1,
        log_path=tmp_path / "w.log",
        start_timeout_s=30,
    )
    agent = AgentProcess(config)
    agent.start()
    data = bids(2_000)
    try:
        with AgentClient(
            agent.address, config.secret_file.read_text().strip().encode(), timeout_s=60
        ) as client:
            before = client.offload(1, 2, 0, Q5, data).table
            first = agent.pid
            assert first is not None
            os.kill(first, signal.SIGKILL)  # nobody asks for a restart
            after = client.offload(3, 4, 0, Q5, data).table  # asked again until the new agent answers
        assert agent.crashes == 1 and agent.pid not in (None, first)
        assert sorted_rows(after) == sorted_rows(before) and isinstance(after, pa.Table)
    finally:
        agent.stop()


def test_keep_warm_reaches_the_agent_on_its_command_line_or_not_at_all(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = AgentProcessConfig(secret_file=tmp_path / "s", max_workers=3, keep_warm_s=90)
    assert " --keep-warm-s 90.0 " in f" {' '.join(config.argv())} "
    for off in (None, 0):
        assert "--keep-warm-s" not in AgentProcessConfig(tmp_path / "s", 3, keep_warm_s=off).argv()
    with pytest.raises(ConfigError, match="--keep-warm must be 0"):
        AgentProcessConfig(secret_file=tmp_path / "s", max_workers=3, keep_warm_s=-1)


@pytest.mark.slow  # the agent and embedded workers as their own processes
def test_the_embedded_fleet_is_kept_warm_while_the_agent_is_idle(tmp_path) -> None:  # type: ignore[no-untyped-def]
    config = AgentProcessConfig(
        secret_file=write_secret(tmp_path / "secret"),
        max_workers=2,
        prewarm=2,
        keep_warm_s=0.5,
        log_path=tmp_path / "workers.log",
        start_timeout_s=30,
    )
    with AgentProcess(config) as agent:
        assert agent.wait_warm(2, 30)
        deadline = time.monotonic() + 30
        while agent.latest().get("keep_warm_pings", 0) < 6 and time.monotonic() < deadline:
            time.sleep(0.1)
    totals = agent.totals()
    assert totals["workers_prewarmed"] == 2 and totals["keep_warm_pings"] >= 6, totals
    assert totals["keep_warm_cold"] == 0, "the pool's environments were pinged, none started anew"


@pytest.mark.slow  # the agent and two warm workers as their own processes
def test_a_keyed_program_named_before_a_switch_warms_the_idle_pool_without_a_cold_start(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from lambda_worker.program import ProgramSpec
    from router.client import AgentClient

    config = AgentProcessConfig(
        secret_file=write_secret(tmp_path / "secret"),
        max_workers=2,
        prewarm=2,
        log_path=tmp_path / "workers.log",
        handoff_dir=tmp_path / "handoff",
        start_timeout_s=30,
    )
    with AgentProcess(config) as agent:
        assert agent.wait_warm(2, 30)
        client = AgentClient(agent.address, (tmp_path / "secret").read_bytes())
        assert client.warm(ProgramSpec("q4", ("winner_at_close6",))) == 2
        client.close()
    totals = agent.totals()
    assert totals["workers_prewarmed"] == 2 and totals["program_warm_ups"] == 2, totals
    assert totals["workers_started"] == totals["chunks_submitted"] == 0, totals  # no session, no chunk
    assert not [k for k, v in totals.items() if k.startswith("operator_offloaded") and v]

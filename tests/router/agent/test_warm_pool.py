"""The warm pool: a start-up round counted as prewarmed, keep-warm rounds only after `keep_warm_s` of an
idle fleet (a busy fleet restarts the clock), the pool's size each round, keep-warm that can be off, and
the programs the VM names: warmed at once while idle, carried by every later round.

The clock is the test's, so each case says exactly when a round is due; the rounds are recorded, not run
on a backend (tests/infra/test_keep_warm.py runs them on a deployed function).
"""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from router import stats
from router.agent.cli import main
from router.agent.warm_pool import Programs, Round, WarmPool, WarmPoolConfig

pytestmark = pytest.mark.timeout(30)


class Rig:
    """A pool on the test's clock, with the rounds it asks for and whether the fleet is busy."""

    def __init__(self, config: WarmPoolConfig, *, cold: int = 0, fail: bool = False) -> None:
        self.now = 1000.0
        self.busy = False
        self.rounds: list[int] = []
        self.programs: list[list[str]] = []  # each round's programs, by query
        self.counters = stats.Counters()
        self._cold, self._fail = cold, fail
        self.pool = WarmPool(config, self._warm, lambda: not self.busy, self.counters, clock=lambda: self.now)

    def _warm(self, n: int, programs: Programs) -> Round:
        self.rounds.append(n)
        self.programs.append([p["query"] for p in programs])
        if self._fail:
            raise RuntimeError("the function is gone")
        return Round(answered=n, cold=min(self._cold, n))

    def at(self, seconds: float) -> Round | None:
        self.now = 1000.0 + seconds
        return self.pool.tick()


def test_keep_warm_pings_the_pool_once_the_fleet_has_been_idle_for_the_interval() -> None:
    rig = Rig(WarmPoolConfig(pool=3, keep_warm_s=60.0), cold=1)
    assert rig.at(59.0) is None and rig.rounds == []
    assert rig.at(60.0) == Round(3, 1) and rig.rounds == [3]
    assert rig.at(100.0) is None  # the round restarted the clock
    assert rig.at(120.0) == Round(3, 1) and rig.rounds == [3, 3]
    assert rig.counters.get(stats.KEEP_WARM_PINGS) == 6 and rig.counters.get(stats.KEEP_WARM_COLD) == 2
    assert rig.counters.get(stats.WORKERS_PREWARMED) == 0


def test_a_busy_fleet_is_never_pinged_and_restarts_the_idle_clock() -> None:
    rig = Rig(WarmPoolConfig(pool=2, keep_warm_s=60.0))
    rig.busy = True
    assert rig.at(30.0) is None and rig.at(200.0) is None  # sessions hold the environments: no ping
    rig.busy = False
    assert rig.at(259.0) is None  # idle since 200 s only
    assert rig.at(260.0) == Round(2, 0) and rig.rounds == [2]


def test_the_start_up_round_counts_as_prewarmed_and_starts_the_clock() -> None:
    rig = Rig(WarmPoolConfig(prewarm=4, pool=2, keep_warm_s=60.0), cold=4)
    rig.now = 1010.0
    assert rig.pool.prewarm() == Round(4, 4)
    assert rig.counters.get(stats.WORKERS_PREWARMED) == 4
    assert rig.counters.get(stats.KEEP_WARM_PINGS) == 0
    assert rig.at(69.0) is None and rig.at(70.0) == Round(2, 2)


def test_a_program_named_while_idle_warms_the_pool_now_and_rides_every_later_round() -> None:
    rig = Rig(WarmPoolConfig(prewarm=2, pool=3, keep_warm_s=60.0))
    assert rig.pool.prewarm() == Round(2, 0) and rig.programs == [[]]
    assert rig.pool.learn({"query": "q4", "node_ids": ["winner_at_close6"]}) == Round(3, 0)
    assert rig.pool.learn({"query": "q4", "node_ids": ["winner_at_close6"]}) == Round(3, 0)  # known: once
    assert rig.pool.learn({"query": "q3", "node_ids": ["window_join8"]}) == Round(3, 0)
    assert rig.programs[1:] == [["q4"], ["q4"], ["q4", "q3"]]
    assert rig.counters.get(stats.PROGRAM_WARM_UPS) == 9 and rig.counters.get(stats.WORKERS_PREWARMED) == 2
    assert rig.at(60.0) == Round(3, 0) and rig.programs[-1] == ["q4", "q3"]


def test_a_program_named_while_the_fleet_is_busy_waits_for_the_next_round() -> None:
    rig = Rig(WarmPoolConfig(pool=2, keep_warm_s=60.0))
    rig.busy = True  # its sessions hold the environments: a warm-up now would start a cold one
    assert rig.pool.learn({"query": "q6", "node_ids": ["winner_at_close6"]}) == Round(0, 0)
    assert rig.at(50.0) is None and rig.rounds == [] and rig.counters.get(stats.PROGRAM_WARM_UPS) == 0
    rig.busy = False
    assert rig.at(109.0) is None and rig.at(110.0) == Round(2, 0) and rig.programs == [["q6"]]


@pytest.mark.parametrize(("prewarm", "keep_warm_s", "now"), [(0, None, 0), (2, None, 2), (2, 0.0, 2)])
def test_without_keep_warm_a_program_warms_only_the_prewarmed_environments(
    prewarm: int, keep_warm_s: float | None, now: int
) -> None:
    rig = Rig(WarmPoolConfig(prewarm=prewarm, pool=3, keep_warm_s=keep_warm_s))
    assert rig.pool.learn({"query": "q4", "node_ids": ["winner_at_close6"]}) == Round(now, 0)
    assert rig.rounds == ([now] if now else [])  # none asked for: no environment is started for it


def test_a_failed_round_costs_only_that_round() -> None:
    rig = Rig(WarmPoolConfig(pool=2, keep_warm_s=10.0), fail=True)
    assert rig.at(10.0) == Round(0, 0) and rig.at(20.0) == Round(0, 0)
    assert rig.rounds == [2, 2] and rig.counters.get(stats.KEEP_WARM_PINGS) == 0


@pytest.mark.parametrize("off", [None, 0, 0.0])
def test_keep_warm_can_be_off(off: float | None) -> None:
    config = WarmPoolConfig(pool=3, keep_warm_s=off)
    assert not config.keeps_warm
    rig = Rig(config)
    rig.pool.start()  # neither a start-up round nor keep-warm: no thread, no round
    assert rig.pool._thread is None and rig.rounds == []
    assert not WarmPoolConfig(pool=0, keep_warm_s=60.0).keeps_warm  # no pool to keep


def test_a_real_loop_prewarms_then_keeps_warm() -> None:
    import threading

    rounds: list[int] = []
    pinged = threading.Event()

    def warm(n: int, programs: Programs) -> Round:
        rounds.append(n)
        if len(rounds) >= 2:
            pinged.set()
        return Round(n, 0)

    pool = WarmPool(WarmPoolConfig(prewarm=1, pool=2, keep_warm_s=0.2), warm, lambda: True, stats.Counters())
    pool.start()
    try:
        assert pinged.wait(10)
    finally:
        pool.stop()
    assert rounds[:2] == [1, 2]


@pytest.mark.parametrize("bad", [-1.0, float("nan")])
def test_a_bad_interval_is_refused_with_a_hint(bad: float) -> None:
    with pytest.raises(ConfigError) as e:
        WarmPoolConfig(pool=2, keep_warm_s=bad)
    assert "--keep-warm" in e.value.one_line() and "(e.g. --keep-warm 240" in e.value.one_line()
    with pytest.raises(ConfigError, match="prewarm"):
        WarmPoolConfig(prewarm=-1)


def test_the_agent_refuses_a_bad_keep_warm_before_anything_starts(tmp_path, capsys) -> None:  # type: ignore[no-untyped-def]
    secret = tmp_path / "secret"
    secret.write_text("s" * 32)
    assert main(["--secret-file", str(secret), "--invoker", "none", "--keep-warm-s", "-5"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: --keep-warm must be 0 (off)") and err.count("\n") == 1

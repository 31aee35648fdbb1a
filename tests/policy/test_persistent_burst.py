"""The persistent-burst rule (policy/persistent_burst.py) on worked numbers, and its log replays exactly.

The setup of ADR 0007's example: 5 base VMs of 4 cores, one VM core carries 10,000 events/s at 100 %
CPU, so a VM serves mu = 4 x 10,000 x 0.7 = 28,000/s at the CPU target and the base VMs carry
140,000/s. A burst of 686,000/s is a = 24.5 VMs of load: the M/M/k count is k = 25 (the stability
bound; at mu = 28,000/s the 0.1 s wait target is met with 14,000/s to spare), so 20 new VMs, the load
of 200 Lambda cores at rho 0.4. Prices are the 2023 defaults (r5.xlarge USD 0.252 / h, 60 s minimum;
1769 MB Lambdas), launch delay 25 s, handover 5 s.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.errors import ConfigError
from policy.cost_model import PersistentBurstConfig, Prices
from policy.decision_log import DecisionLog, read, replay_vms
from policy.monitor import Observation
from policy.offload_policy import Decision, PolicyConfig
from policy.persistent_burst import PersistentBurstRule, VmRequest
from policy.sim.experiment import QueryRuns, SimConfig, simulate_query

PER_CORE = 10_000.0
BASE_RATE = 140_000.0  # the base VMs at the 70 % target
BURST_RATE = 686_000.0  # 24.5 VMs of load
CONFIG = PersistentBurstConfig()  # launch 25 s, handover 5 s, hysteresis 0.2
PRICES = Prices()


def make_rule(**overrides: float) -> PersistentBurstRule:
    kwargs = {"per_core_rate": PER_CORE, "rho": 0.4, "cores_per_vm": 4, "base_vms": 5, **overrides}
    return PersistentBurstRule(CONFIG, PRICES, **kwargs)  # type: ignore[arg-type]


def obs(t: float, rate: float) -> Observation:
    return Observation(t, 0.9, rate, rate, 0, 1.0, vm_cores=20, cost_ms=0.1)


def decision(t: float, share: float, workers: int, per_core: float = PER_CORE) -> Decision:
    trigger = "input-rate" if share else "hold"
    return Decision(t, share, workers, trigger, BASE_RATE, BURST_RATE, 0.0, per_core)


class Pool:
    """A stand-in for the live VM pool: a request is pending for the launch delay, then usable."""

    def __init__(self, delay: float = 25.0, lag: float = 0.0) -> None:
        self.delay, self.lag = delay, lag  # lag: how long a request takes to show up as pending
        self.groups: list[list[float]] = []  # [requested at, VMs]

    def apply(self, req: VmRequest) -> None:
        if req.add:
            self.groups.append([req.t, req.add])
        left = req.release
        while left and self.groups:
            take = min(left, int(self.groups[0][1]))
            self.groups[0][1] -= take
            left -= take
            if not self.groups[0][1]:
                self.groups.pop(0)

    def counts(self, t: float) -> tuple[int, int]:
        usable = sum(int(n) for t0, n in self.groups if t - t0 >= self.delay)
        pending = sum(int(n) for t0, n in self.groups if self.lag <= t - t0 < self.delay)
        return usable, pending


Step = tuple[float, float, float, int]  # t, input rate, share, workers


def drive(rule: PersistentBurstRule, steps: list[Step], pool: Pool | None = None) -> list[VmRequest]:
    pool = pool or Pool()
    out = []
    for t, rate, share, workers in steps:
        req = rule.step(obs(t, rate), decision(t, share, workers), *pool.counts(t))
        if req is not None:
            pool.apply(req)
            out.append(req)
    return out


def calm(start: int, end: int, rate: float = BASE_RATE) -> list[Step]:
    return [(float(t), rate, 0.0, 0) for t in range(start, end)]


def burst(start: int, end: int, workers: int = 200, rate: float = BURST_RATE) -> list[Step]:
    return [(float(t), rate, 0.8, workers) for t in range(start, end)]


def test_the_adr_example_starts_buying_at_65_s() -> None:
    """The burst starts offloading at t = 100. Ski rental expects it to last its age T again; 20 VMs
    (launched now, billed from now, bridged by the Lambdas for 25 + 5 s) cost <= 0.8 x the 200 Lambdas
    over T from T = 64.8 s (cost_model's test), so at the first whole second past it: t = 165."""
    reqs = drive(make_rule(), calm(0, 100) + burst(100, 200))
    assert len(reqs) == 1
    r = reqs[0]
    assert (r.t, r.add, r.release, r.servers) == (165.0, 20, 0, 25)
    d = r.decision
    assert d is not None and d.buy and d.vms == 20 and d.lambda_cores == 200
    assert d.burst_elapsed_s == 65.0 and d.horizon_s == 65.0
    assert d.vm_usd / d.lambda_usd == pytest.approx(0.798, abs=0.001)  # just under the 0.8 threshold
    assert d.breakeven_s == pytest.approx(47.667, abs=0.001)
    assert "M/M/k: 25 VMs" in r.reason and "start buying" in r.reason


def test_a_lambda_core_worth_7_7_vm_cores_never_buys() -> None:
    """Q1's rho 7.7: the 546,000/s the base VMs cannot carry take ceil(546,000 / (0.7 x 7.7 x 10,000))
    = 11 Lambda cores, USD 3.2e-4 / s, while the 20 VMs they would be swapped for cost 1.4e-3 / s."""
    reqs = drive(make_rule(rho=7.7), calm(0, 10) + burst(10, 3610, workers=11))
    assert reqs == []


def test_a_burst_that_ends_before_the_breakeven_never_buys() -> None:
    """Two 60 s bursts 10 s apart: the age restarts after the calm second, so neither reaches 65 s."""
    steps = calm(0, 100) + burst(100, 160) + calm(160, 170) + burst(170, 230) + calm(230, 400)
    reqs = drive(make_rule(), steps)
    assert reqs == []


def test_a_load_the_vms_carry_inside_the_band_buys_nothing() -> None:
    """The policy still offloads (draining a backlog) at the stable 140,000/s: a = 5.0, so the M/M/k
    count is 6 (k mu > lambda is strict), but 5 VMs carry it at 70 % CPU, inside the band: no VM."""
    reqs = drive(make_rule(), calm(0, 100) + burst(100, 1000, rate=BASE_RATE))
    assert reqs == []


def test_a_long_burst_buys_once_and_never_repeats_a_pending_request() -> None:
    """The pool shows the request only 3 s late (the rule's own bookkeeping covers the gap), then 25 s
    pending, then usable: one request over 20 minutes."""
    reqs = drive(make_rule(), calm(0, 100) + burst(100, 1300), Pool(lag=3.0))
    assert [(r.t, r.add) for r in reqs] == [(165.0, 20)]


def test_a_growing_burst_tops_up_only_once_the_first_vms_are_usable() -> None:
    """At t = 170 the input rises to 1,000,000/s: k = floor(35.7) + 1 = 36, so 11 more VMs, but the 20
    requested at t = 165 are pending until t = 190; the top-up waits for them (one need at a time) and
    is bought at t = 190 (keep buying: 11 VMs cost <= 1.2 x the 110 Lambdas' over 90 s)."""
    steps = calm(0, 100) + burst(100, 170) + burst(170, 400, workers=110, rate=1_000_000.0)
    reqs = drive(make_rule(), steps)
    assert [(r.t, r.add, r.servers) for r in reqs] == [(165.0, 20, 25), (190.0, 11, 36)]
    assert reqs[1].decision is not None and "keep buying" in reqs[1].reason


def test_the_learnt_per_core_rate_sizes_the_vms() -> None:
    """The policy learnt 20,000/s per core: mu = 56,000/s, a = 12.25, k = 13, so 8 new VMs; cheaper
    than 20, they pay off sooner: 30 lam + (25 + R) x 8 x 7e-5 <= 0.8 lam R from R = 46.1 s."""
    rule = make_rule()
    reqs = [rule.step(obs(t, BURST_RATE), decision(t, 0.8, 200, per_core=20_000.0), 0, 0) for t in range(80)]
    first = next(r for r in reqs if r is not None)
    assert (first.t, first.add, first.servers) == (47, 8, 13)
    assert sum(r is not None for r in reqs) == 1  # the pool never shows it here: the rule's bookkeeping


def test_release_waits_for_the_hold_after_the_burst() -> None:
    """Bought at 165; the VMs carry the burst with no offloaded share until 400 (no release: the input
    does not fit the base VMs' 160,000/s at 80 %); then the input is back to 140,000/s: released after
    the 30 s hold (launch delay + handover), at t = 430."""
    steps = calm(0, 100) + burst(100, 200) + calm(200, 400, rate=BURST_RATE) + calm(400, 500)
    reqs = drive(make_rule(), steps)
    assert [(r.t, r.add, r.release) for r in reqs] == [(165.0, 20, 0), (430.0, 0, 20)]
    assert reqs[1].decision is None and "burst over" in reqs[1].reason


def test_release_waits_for_the_vms_billing_minimum() -> None:
    """Bought at 165, burst over at 170: the 30 s hold ends at 200, but the VMs are billed 60 s anyway,
    so they go at 165 + 60 = 225, not before."""
    reqs = drive(make_rule(), calm(0, 100) + burst(100, 170) + calm(170, 300))
    assert [(r.t, r.release) for r in reqs] == [(165.0, 0), (225.0, 20)]


def test_a_dip_shorter_than_the_hold_keeps_the_vms() -> None:
    steps = calm(0, 100) + burst(100, 300) + calm(300, 320) + burst(320, 400) + calm(400, 440)
    reqs = drive(make_rule(), steps)
    assert [(r.t, r.add, r.release) for r in reqs] == [(165.0, 20, 0), (430.0, 0, 20)]


def test_a_logged_run_replays_to_the_same_requests(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    rule, pool = make_rule(), Pool(lag=2.0)
    log = DecisionLog(path, PolicyConfig(per_core_rate=PER_CORE, rho=0.4), vm_rule=rule)
    steps = calm(0, 100) + burst(100, 170) + burst(170, 300, workers=110, rate=1_000_000.0) + calm(300, 420)
    for t, rate, share, workers in steps:
        o, d = obs(t, rate), decision(t, share, workers)
        usable, pending = pool.counts(t)
        req = rule.step(o, d, usable, pending)
        if req is not None:
            pool.apply(req)
        log.record(o, d, vms_usable=usable, vms_pending=pending, vm_request=req)
    log.close()
    pairs = replay_vms(path)
    assert len(pairs) == len(steps)
    assert all(logged == again for logged, again in pairs)
    acted = [p[0] for p in pairs if p[0] is not None]
    assert [(r.t, r.add, r.release) for r in acted] == [(165.0, 20, 0), (190.0, 11, 0), (330.0, 0, 31)]
    assert len(read(path)[1]) == len(steps)  # the policy's own reader still reads the log


def test_bad_configuration_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError, match="per_core_rate"):
        make_rule(per_core_rate=0.0)
    with pytest.raises(ConfigError, match="rho"):
        make_rule(rho=-1.0)
    with pytest.raises(ConfigError, match="waiting-time target"):
        make_rule(wait_target_s=0.0)
    with pytest.raises(ConfigError, match="release_hold_s"):
        make_rule(release_hold_s=-1.0)
    with pytest.raises(ConfigError, match="vms_pending"):
        make_rule().step(obs(0, BASE_RATE), decision(0, 0.0, 0), 0, -1)


@pytest.fixture(scope="module")
def persistent() -> tuple[QueryRuns, QueryRuns]:
    """Q1 at paper scale, a 600 s 5x burst from t = 60 s, a Lambda core = a VM core (rho 1, as on AWS)."""
    config = SimConfig(pattern="sudden:5x:600s", duration_s=900.0, rho=1.0)
    return (
        simulate_query("q1", ["sponge"], config),
        simulate_query("q1", ["sponge"], replace(config, vm_handover=False)),
    )


def test_the_simulator_hands_a_persistent_burst_to_vms(persistent: tuple[QueryRuns, QueryRuns]) -> None:
    """5x Q1 is 2,750,000/s against VMs of mu = 4 x 39,286 x 0.7 = 110,000/s: a = 25.0, so k = 26 and
    21 new VMs; bought once ski rental says so, usable 31.5 s later (launch + JVM start), released
    after the burst's end (660 s) plus the hold, and cheaper than keeping the Lambdas."""
    with_vms, without = persistent
    run = with_vms.report["runs"][0]
    reqs = run["vm_requests"]
    assert [(r["add"], r["release"], r["servers"]) for r in reqs] == [(21, 0, 26), (0, 21, 6)]
    bought, released = reqs[0]["t"], reqs[1]["t"]
    assert 60 + 65 <= bought < 660 and released >= max(660.0, bought + 60.0)
    cores = run["vm_cores_by_second"]
    assert cores[int(bought)] == 20 and cores[int(bought) + 33] == 20 + 21 * 4
    assert cores[int(released) + 1] == 20
    workers = run["workers_by_second"]
    assert workers[int(bought) + 40] < workers[int(bought) - 1] / 5  # the Lambdas handed the load back
    assert run["cost_usd"] < without.report["runs"][0]["cost_usd"]
    assert "vm-request" in run["notes"] and "vm-release" in run["notes"]


def test_a_short_burst_stays_on_lambda_in_the_simulator() -> None:
    runs = simulate_query("q1", ["sponge"], SimConfig(rho=1.0))  # sudden:5x:60s
    assert runs.report["runs"][0]["vm_requests"] == []

"""Worked prices of Lambda and VM time, the buy-VMs rule, and Fig. 15(b) of Sponge (policy/cost_model.py).

Prices are the module's 2023 us-east-1 defaults: Lambda x86_64 USD 0.0000166667 / GB-s, arm64
USD 0.0000133334 / GB-s, USD 0.20 per million requests; r5.xlarge USD 0.252 / h, per-second billing,
60 s minimum; Kinesis USD 0.015 per shard-hour and USD 0.014 per million PUT payload units.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.cost_model import (
    DailySetup,
    PersistentBurstConfig,
    Prices,
    breakeven_remaining_s,
    cheaper_to_buy_vms,
    crossover_fraction,
    daily_cost,
    daily_cost_curve,
    fleet_cost_usd,
    lambda_cost_usd,
    stream_cost_usd,
    vm_cost_usd,
    vms_for_lambda_cores,
)

PRICES = Prices()
CONFIG = PersistentBurstConfig()
LAMBDA_200_PER_S = 200 * 1769 / 1024 * 0.0000166667  # 345.5078 GB x price = USD 0.0057585 per second


def test_lambda_cost_worked_example() -> None:
    """200 workers x 1769 MB x 60 s = 200 x 60 x 1.72754 GB = 20,730.47 GB-s; x USD 0.0000166667 =
    USD 0.345509; 200 requests x USD 0.20 / 1e6 = USD 0.00004; total USD 0.345549.
    On arm64: 20,730.47 x 0.0000133334 = USD 0.276408 + 0.00004.
    """
    assert lambda_cost_usd(200, 1769, 60.0, prices=PRICES) == pytest.approx(0.345549, abs=1e-6)
    assert lambda_cost_usd(200, 1769, 60.0, prices=PRICES, arch="arm64") == pytest.approx(0.276448, abs=1e-6)
    # Duration is billed per 1 ms: 0.0004 s counts as 0.001 s (1 GB: USD 1.67e-8 + one request 2e-7).
    assert lambda_cost_usd(1, 1024, 0.0004, prices=PRICES) == pytest.approx(0.001 * 0.0000166667 + 2e-7)
    assert lambda_cost_usd(0, 1769, 60.0, prices=PRICES) == 0.0


def test_a_fleet_on_provisioned_environments_pays_their_standing_price_and_less_per_second() -> None:
    """Five seconds at 1 GB with 0, 0, 3, 3 and 1 workers and 2 environments provisioned: 5
    worker-seconds ran on them (USD 0.0000097222 each), 2 on demand (0.0000166667 each, one request
    0.0000002), and the 2 environments stood for 5 s each (10 x 0.0000041667)."""
    workers = [0, 0, 3, 3, 1]
    expected = 5 * 0.0000097222 + 2 * 0.0000166667 + 0.0000002 + 10 * 0.0000041667
    assert fleet_cost_usd(workers, 1024, provisioned=2, prices=PRICES) == pytest.approx(expected, rel=1e-9)
    assert fleet_cost_usd(workers, 1024, prices=PRICES) == lambda_cost_usd(1, 1024, 7.0, prices=PRICES)
    # Idle all along, the environments still cost their standing price: the price of a warm start.
    assert fleet_cost_usd([0] * 60, 1024, provisioned=1, prices=PRICES) == pytest.approx(
        60 * 0.0000041667 + 0.0000002, rel=1e-9
    )
    with pytest.raises(ConfigError):
        fleet_cost_usd(workers, 1024, provisioned=-1, prices=PRICES)


def test_vm_cost_worked_example() -> None:
    """r5.xlarge at USD 0.252 / h = USD 0.00007 / s. 30 s is billed as the 60 s minimum: USD 0.0042.
    5 VMs for an hour: USD 1.26. 90.5 s rounds up to 91 s: USD 0.00637. A day of 5 VMs: USD 30.24."""
    assert vm_cost_usd(1, 30.0, prices=PRICES) == pytest.approx(0.0042)
    assert vm_cost_usd(5, 3600.0, prices=PRICES) == pytest.approx(1.26)
    assert vm_cost_usd(1, 90.5, prices=PRICES) == pytest.approx(0.00637)
    assert vm_cost_usd(5, 86_400.0, prices=PRICES) == pytest.approx(30.24)
    assert vm_cost_usd(3, 0.0, prices=PRICES) == 0.0


def test_stream_cost_worked_example() -> None:
    """Two shards for a 60 s drill are 1/30 of a shard-hour: USD 0.0005; 3 million events put add
    USD 0.042. A day of 2 shards: USD 0.72. No shards, no records: nothing."""
    assert stream_cost_usd(2, 60.0, 0, prices=PRICES) == pytest.approx(0.0005)
    assert stream_cost_usd(2, 60.0, 3_000_000, prices=PRICES) == pytest.approx(0.0425)
    assert stream_cost_usd(2, 86_400.0, 0, prices=PRICES) == pytest.approx(0.72)
    assert stream_cost_usd(0, 60.0, 0, prices=PRICES) == 0.0
    with pytest.raises(ConfigError):
        stream_cost_usd(-1, 60.0, 0, prices=PRICES)


def test_a_lambda_core_costs_more_than_an_r5_core() -> None:
    """1769 MB (one vCPU): 1.72754 GB x 0.0000166667 = USD 2.879e-5 / s; an r5.xlarge core:
    0.252 / 4 / 3600 = USD 1.75e-5 / s; ratio 1.645."""
    per_lambda_core = lambda_cost_usd(1, 1769, 3600.0, requests=0, prices=PRICES)
    per_vm_core = vm_cost_usd(1, 3600.0, prices=PRICES) / PRICES.vm_cores
    assert per_lambda_core / per_vm_core == pytest.approx(1.645, abs=0.001)


def test_vms_for_lambda_cores_uses_rho_as_in_eq3() -> None:
    """rho = a Lambda core's capacity in VM cores: 200 Lambda cores at rho 0.4 = 80 VM cores = 20 VMs."""
    assert vms_for_lambda_cores(200, rho=0.4, cores_per_vm=4) == 20
    assert vms_for_lambda_cores(201, rho=0.4, cores_per_vm=4) == 21
    assert vms_for_lambda_cores(3, rho=1.0, cores_per_vm=4) == 1
    assert vms_for_lambda_cores(0, rho=1.0, cores_per_vm=4) == 0
    with pytest.raises(ConfigError, match="rho"):
        vms_for_lambda_cores(10, rho=0.0, cores_per_vm=4)


def test_breakeven_worked_example() -> None:
    """The paper's burst: 200 Lambdas (lam = USD 0.0057585 / s) or 20 r5.xlarge (vm = USD 0.0014 / s),
    launch delay D = 25 s, handover H = 5 s. VM path over a remaining R: lam (D + H) + vm (D + R) once
    D + R >= 60 s; equal to lam R at R = (30 lam + 25 vm) / (lam - vm) = 0.20776 / 0.0043585 = 47.67 s.
    """
    lam, vm = LAMBDA_200_PER_S, 20 * 0.252 / 3600
    expected = (30 * lam + 25 * vm) / (lam - vm)
    assert expected == pytest.approx(47.667, abs=0.001)
    assert breakeven_remaining_s(200, 20, prices=PRICES, config=CONFIG) == pytest.approx(expected)
    # VMs more expensive per second than the Lambdas they replace never pay off.
    assert math.isinf(breakeven_remaining_s(1, 1, prices=PRICES, config=CONFIG))
    # With no launch delay or handover a single VM still pays its 60 s minimum: 1 Lambda core of 1769 MB
    # at 2.879e-5 / s against one VM (7e-5 / s) never breaks even; 4 Lambda cores (1.152e-4 / s) break
    # even on one VM's minimum at R = 60 x 7e-5 / 1.152e-4 = 36.5 s.
    instant = PersistentBurstConfig(launch_delay_s=0.0, handover_s=0.0)
    four = 4 * 1769 / 1024 * 0.0000166667
    assert breakeven_remaining_s(4, 1, prices=PRICES, config=instant) == pytest.approx(60 * 0.00007 / four)


def test_buy_vms_follows_ski_rental_with_hysteresis() -> None:
    """Same burst; the forecast remaining time equals the burst's age T (remaining_factor 1).

    The rule: VM path <= 0.8 x Lambda path to start buying (hysteresis 0.2), <= 1.2 x to keep buying.
    T = 40 s: Lambda 40 lam = USD 0.23034 (+ 200 requests = 0.23038); VM 30 lam + 65 s x 20 VMs x 7e-5
    = 0.17276 + 0.091 (+ 0.00004) = 0.26380; ratio 1.145: do not start, but keep buying if already started.
    T = 70 s: Lambda 0.40313; VM 0.17280 + 95 x 0.0014 = 0.30580; ratio 0.759 <= 0.8: buy.
    The start threshold solves 30 lam + (25 + R) vm = 0.8 lam R: R = 0.20776 / 0.0032068 = 64.8 s;
    the keep threshold solves ... = 1.2 lam R: R = 0.20776 / 0.0055102 = 37.7 s.
    """

    def decide(t: float, buying: bool) -> bool:
        return cheaper_to_buy_vms(t, 200, rho=0.4, prices=PRICES, config=CONFIG, buying=buying).buy

    d40 = cheaper_to_buy_vms(40.0, 200, rho=0.4, prices=PRICES, config=CONFIG)
    assert d40.vms == 20 and d40.horizon_s == 40.0
    assert d40.lambda_usd == pytest.approx(40 * LAMBDA_200_PER_S + 200 * 0.2e-6)
    assert d40.vm_usd == pytest.approx(30 * LAMBDA_200_PER_S + 200 * 0.2e-6 + 65 * 20 * 0.00007)
    assert d40.vm_usd / d40.lambda_usd == pytest.approx(1.145, abs=0.001)
    assert not d40.buy and decide(40.0, buying=True)
    d70 = cheaper_to_buy_vms(70.0, 200, rho=0.4, prices=PRICES, config=CONFIG)
    assert d70.buy and d70.vm_usd / d70.lambda_usd == pytest.approx(0.759, abs=0.001)
    assert [decide(t, False) for t in (60.0, 64.0, 65.0)] == [False, False, True]
    assert [decide(t, True) for t in (37.0, 38.0)] == [False, True]
    # The band keeps a decision put while the forecast load wobbles around break-even.
    assert decide(50.0, buying=True) and not decide(50.0, buying=False)


def test_buy_decision_takes_a_forecast_and_an_mmk_count() -> None:
    d = cheaper_to_buy_vms(10.0, 200, rho=0.4, prices=PRICES, config=CONFIG, expected_remaining_s=600.0)
    assert d.buy and d.horizon_s == 600.0
    assert cheaper_to_buy_vms(600.0, 200, rho=0.4, prices=PRICES, config=CONFIG, vms=22).vms == 22
    # A Lambda core worth 7.7 VM cores (bench/offload.py, Q1) is cheaper than the VMs it would replace.
    assert not cheaper_to_buy_vms(3600.0, 10, rho=7.7, prices=PRICES, config=CONFIG).buy
    assert not cheaper_to_buy_vms(3600.0, 0, rho=1.0, prices=PRICES, config=CONFIG).buy


@given(t=st.floats(0, 10_000), cores=st.integers(1, 400), rho=st.floats(0.1, 4.0))
def test_buying_is_sticky(t: float, cores: int, rho: float) -> None:
    """Whatever the inputs, a burst that would start buying also keeps buying (the band only widens)."""
    start = cheaper_to_buy_vms(t, cores, rho=rho, prices=PRICES, config=CONFIG, buying=False)
    keep = cheaper_to_buy_vms(t, cores, rho=rho, prices=PRICES, config=CONFIG, buying=True)
    assert keep.buy or not start.buy


def test_fig15b_daily_costs_with_the_paper_setup() -> None:
    """5 x r5.xlarge all day: 5 x 24 x 0.252 = USD 30.24; 20 VMs: 120.96; 25 VMs: 151.20.
    200 Lambdas of 1769 MB for a share f of the day: f x 86,400 x USD 0.0057585 = f x USD 497.53 (plus
    200 requests per 15 minutes). Sponge = static 20 at f = 90.72 / 497.53 = 18.2 %, static 25 at
    f = 120.96 / 497.53 = 24.3 %: cheaper than 20 VMs below ~15 %, dearer than 25 VMs above ~25 %,
    as in Fig. 15(b).
    """
    setup = DailySetup()
    curve = daily_cost_curve([0.0, 0.01, 0.15, 0.25], setup, prices=PRICES)
    at = {round(c.burst_fraction, 2): c for c in curve}
    assert at[0.0].sponge_usd == pytest.approx(30.24)
    assert at[0.0].static_usd == pytest.approx({20: 120.96, 25: 151.2})
    assert at[0.01].sponge_usd == pytest.approx(30.24 + 0.01 * 86_400 * LAMBDA_200_PER_S + 200 * 0.2e-6)
    assert at[0.15].sponge_usd < at[0.15].static_usd[20]
    assert at[0.25].sponge_usd > at[0.25].static_usd[25]
    f20, f25 = crossover_fraction(20, setup, prices=PRICES), crossover_fraction(25, setup, prices=PRICES)
    assert f20 == pytest.approx(90.72 / (86_400 * LAMBDA_200_PER_S), abs=1e-4)
    assert f25 == pytest.approx(120.96 / (86_400 * LAMBDA_200_PER_S), abs=1e-4)
    assert 0.15 < f20 < f25 < 0.25
    # Short bursts: at 1 % of the day Sponge costs about a quarter of the 25-VM fleet.
    assert 1 - at[0.01].sponge_usd / at[0.01].static_usd[25] == pytest.approx(0.767, abs=0.001)
    assert crossover_fraction(5, setup, prices=PRICES) == 0.0
    assert math.isinf(crossover_fraction(100, setup, prices=PRICES))


def test_bad_configuration_is_refused_with_a_hint() -> None:
    with pytest.raises(ConfigError):
        Prices(vm_usd_per_hour=-1.0)
    with pytest.raises(ConfigError):
        Prices(lambda_usd_per_gb_s_x86_64=float("nan"))
    with pytest.raises(ConfigError, match="vm_cores"):
        Prices(vm_cores=0)
    with pytest.raises(ConfigError, match="architecture"):
        PersistentBurstConfig(lambda_arch="sparc")
    with pytest.raises(ConfigError, match="hysteresis"):
        PersistentBurstConfig(hysteresis=1.0)
    with pytest.raises(ConfigError, match="128-10240 MB") as bad_memory:
        lambda_cost_usd(1, 64, 1.0, prices=PRICES)
    assert "1769 MB" in bad_memory.value.hint
    with pytest.raises(ConfigError):
        daily_cost(1.5, DailySetup(), prices=PRICES)
    with pytest.raises(ConfigError) as bad_arch:
        lambda_cost_usd(1, 1769, 1.0, prices=PRICES, arch="mips")
    assert "arm64" in bad_arch.value.hint

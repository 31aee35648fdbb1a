"""The probe's epoch-cost fit and what the drill derives from it, on worked numbers."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from core.drill.calibrate import (
    PROBE_SCHEDULE,
    Calibration,
    EpochCost,
    fit_probe,
    fixed_from_small_epochs,
    offload_cost,
)
from core.drill.drill import BATCH_CAP
from core.errors import SpongeError
from core.latency import Epoch
from core.nexmark.schedule import RateSchedule
from core.offload_plan import DEFAULT_OFFLOAD_COST
from policy.offload_policy import offload_pays


def epochs(costs: list[tuple[int, float]], fixed: float = 1.0) -> list[Epoch]:
    """Back-to-back epochs of the given sizes lasting `fixed` + their cost, after two slow first ones."""
    out, t, offset = [], 0.0, 0
    for n, per_event in [(5_000, 5e-3), (5_000, 1e-3), *costs]:
        duration = fixed + n * per_event
        out.append(Epoch(t, t + duration, offset, offset + n))
        t, offset = t + duration, offset + n
    return out


def probe(per_event: float, fixed: float = 1.0, full: int = 60_000) -> tuple[list[Epoch], list[Epoch]]:
    """A probe's warm-up (small epochs of 3,750 events) and trace (full epochs of `full` events), each
    after slow first epochs, lasting `fixed` + `per_event` x their size."""
    return epochs([(3_750, per_event)] * 6, fixed), epochs([(full, per_event)] * 5, fixed)[1:]


def test_the_fit_recovers_fixed_and_per_event_cost_and_skips_the_first_epochs() -> None:
    """T = 1 s + 20 us x n: capacity 50,000/s, stable rate at U = 0.7: 35,000/s, epochs there last
    F / (1 - U) = 3.33 s."""
    cost = fit_probe(*probe(20e-6))
    assert cost.fixed_s == pytest.approx(1.0)
    assert cost.per_event_s == pytest.approx(20e-6)
    assert cost.capacity(batch_cap=10**9) == pytest.approx(50_000, rel=1e-3)
    assert cost.stable_rate(batch_cap=10**9) == pytest.approx(35_000, rel=1e-3)
    # A cap of 50,000 offsets per epoch: full epochs last 1 + 1 = 2 s, so 25,000/s is the limit.
    assert cost.capacity(batch_cap=50_000) == pytest.approx(25_000)
    assert cost.epochs == 4 + 5  # the warm-up's later half, the trace after its first epoch


def test_the_offload_cost_is_in_kept_events() -> None:
    """Offloading 80 % made an event cost 0.3 c on average: 0.2 + 0.8 k = 0.3, so k = 0.125."""
    plain = EpochCost(1.0, 20e-6, 5)
    assert offload_cost(plain, EpochCost(1.2, 6e-6, 5), share=0.8) == pytest.approx(0.125)
    assert offload_cost(plain, EpochCost(1.2, 1e-6, 5), share=0.8) == 0.1  # noise never makes it free


def test_an_offload_that_costs_the_vm_more_than_keeping_is_measured_not_capped() -> None:
    """Q8 here: plain 0.63 us per event, routed (80 % offloaded) 3.5 us: 0.2 + 0.8 k = 5.56, k = 6.7."""
    plain = EpochCost(1.34, 0.63e-6, 19)
    assert offload_cost(plain, EpochCost(1.26, 3.5e-6, 14), share=0.8) == pytest.approx(6.69, abs=0.01)
    assert not Calibration(95_400, 6.69, plain).offload_pays
    assert "sponge will not offload" in Calibration(95_400, 6.69, plain).describe()
    assert Calibration(59_100, 0.22, plain).offload_pays


@pytest.mark.parametrize(
    ("reading", "pays", "policy_cost"),
    [
        (0.1, True, 0.1),
        (0.82, True, 0.82),
        (1.22, True, 0.9),
        (1.49, True, 0.9),
        (1.5, False, 1.5),
        (2.06, False, 2.06),
        (6.69, False, 6.69),
    ],
)
def test_a_reading_within_the_probes_scatter_of_paying_pays_and_the_policy_offloads_the_most(
    reading: float, pays: bool, policy_cost: float
) -> None:
    """Q5's probes read up to 1.22 where most read 0.10; Q3's and Q8's read 2.06-6.69. A reading under 1.5
    is taken as paying, and the policy then sizes its share on a cost under 1."""
    calibration = Calibration(100_000, reading, EpochCost(1.0, 2e-6, 8))
    assert calibration.offload_pays is pays
    assert calibration.policy_cost == policy_cost
    assert offload_pays(calibration.policy_cost) is pays
    assert ("within the probe's scatter" in calibration.describe()) is (pays and reading > 0.9)


def test_the_probe_fills_several_epochs_faster_than_a_core_admits_them() -> None:
    """The probe must leave full epochs behind its first two: more events than six capped epochs, released
    faster than one core's cap over a fixed cost of half a second (F is 0.4-1.5 s on every query here)."""
    (step,) = RateSchedule.parse(PROBE_SCHEDULE).segments
    assert step.rate_start >= BATCH_CAP / 0.5
    assert step.duration_s * step.rate_start >= 6 * BATCH_CAP


def test_a_probe_s_line_joins_its_warm_up_s_small_epochs_and_its_trace_s_full_ones() -> None:
    """Warm-up: slow first epochs, then some of 3,750 events at about F. Trace: a slow first epoch (the
    helper's first two), then full ones of 200,000 events. Both end on epochs of a few events, the
    source's end markers, shorter than F: they are no part of the line. T = 0.8 s + 2 us x n."""
    warmup = epochs([(3_750, 2e-6)] * 6, fixed=0.8)  # the helper's two slow ones, then six
    trace = epochs([(200_000, 2e-6)] * 4, fixed=0.8)[1:]
    tail = warmup[-1].covered, warmup[-1].commit_t
    ends = [
        Epoch(tail[1], tail[1] + 0.6, tail[0], tail[0] + 1),
        Epoch(tail[1] + 0.6, tail[1] + 1.2, tail[0] + 1, tail[0] + 2),
    ]
    cost = fit_probe(list(reversed(warmup + ends)), trace)
    assert cost.fixed_s == pytest.approx(0.8)
    assert cost.per_event_s == pytest.approx(2e-6)
    assert cost.epochs == 3 + 4  # the warm-up's later half of full-size epochs and the trace after its first
    with pytest.raises(SpongeError, match="too few"):  # a trace without full epochs: no line
        fit_probe(warmup, trace[:1])


def test_a_probe_that_cannot_be_fitted_says_what_to_do() -> None:
    warmup, trace = probe(20e-6)
    with pytest.raises(SpongeError, match="too few"):
        fit_probe(warmup, trace[:2])


def test_epochs_that_do_not_grow_with_their_size_are_the_fixed_cost_alone() -> None:
    """When the fixed cost's jitter hides the records' cost, the cap over F is the VM's capacity."""
    warmup, trace = probe(0.0, fixed=1.6)
    trace = [replace(e, commit_t=e.commit_t - 0.1) for e in trace]  # bigger epochs finishing faster
    cost = fit_probe(warmup, trace)
    assert cost.per_event_s == 0.0
    assert cost.fixed_s == pytest.approx(1.5)  # the median epoch: four small ones at 1.6 s, five full at 1.5
    assert cost.capacity(batch_cap=200_000) == pytest.approx(200_000 / 1.5)
    assert offload_cost(cost, EpochCost(1.2, 1e-6, 5), share=0.8) == DEFAULT_OFFLOAD_COST


def test_a_warm_up_s_small_epochs_give_the_fixed_cost_without_its_first_slow_ones() -> None:
    durations = [9.0, 4.0, 2.0, 1.5, 0.8, 0.9, 0.7, 0.8]
    epochs, t = [], 100.0
    for i, d in enumerate(durations):
        epochs.append(Epoch(started_t=t, commit_t=t + d, start=i * 100, covered=(i + 1) * 100))
        t += d
    assert fixed_from_small_epochs(list(reversed(epochs))) == pytest.approx(0.8)
    assert fixed_from_small_epochs([]) is None


def test_an_offload_probe_too_short_to_fit_leaves_the_default_offload_cost_and_probes_next_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a machine slow enough for a few long epochs the routed probe cannot be fitted: the drill goes
    on with the plain probe's rate and the default offload cost, and its next run probes again."""
    from core.drill import drill

    plain = EpochCost(fixed_s=1.0, per_event_s=2e-6, epochs=9)
    probed: list[str] = []

    def probe(config, name, share, status, app):  # type: ignore[no-untyped-def]
        probed.append(name)
        if share:
            fit_probe([], [])  # too few epochs: raises
        return plain

    monkeypatch.setattr(drill, "_probe", probe)
    config = drill.DrillConfig(report=tmp_path, policies=("sponge", "noscaling"))
    said: list[str] = []
    found = drill.calibrate(config, said.append, app=None)
    assert found.rate == round(plain.stable_rate(BATCH_CAP), -2) and found.routed is None
    assert found.offload_cost == DEFAULT_OFFLOAD_COST
    assert any("too few" in s and "default offload cost" in s for s in said)
    assert drill.calibrate(config, said.append, app=None) == found
    assert probed == ["probe", "probe-offload", "probe-offload"]  # the plain probe came from the cache

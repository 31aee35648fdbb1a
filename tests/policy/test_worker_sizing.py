"""Workers for an offloaded rate: Sponge's Eq. 3, the M/M/k check on it, and Es-Stream's Algorithm 1.

Worked numbers at the simulator's paper scale for Q5 (a worker serves rho x per-core = 19.62 x 1,357 =
26,630 events/s; a chunk is 9,091 events, 0.341 s on one worker): a 2x burst offloads 32,020 events/s,
a = 1.20. Eq. 3 asks for ceil(32,020 / (0.7 x 26,630)) = 2 workers, at which a chunk waits 0.19 s on
average for one (Erlang C); 3 workers bring that to 0.03 s, under the 0.1 s target.
"""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import ConfigError
from policy.equations import lambda_cores
from policy.monitor import Observation
from policy.offload_policy import PolicyConfig, SpongePolicy
from policy.queueing import es_stream_servers, mean_waiting_time
from policy.worker_sizing import EQ3, EQ3_MMK, ES_STREAM, workers_for

PER_CORE, RHO, CHUNK = 19_000 / 14, 19.62, 9_091


def test_q5s_two_eq3_workers_become_three_under_the_wait_check() -> None:
    assert workers_for(32_020, PER_CORE, RHO, 0.7, sizing=EQ3, chunk_events=CHUNK) == 2
    assert workers_for(32_020, PER_CORE, RHO, 0.7, sizing=EQ3_MMK, chunk_events=CHUNK) == 3
    mu, lam = RHO * PER_CORE / CHUNK, 32_020 / CHUNK
    assert mean_waiting_time(lam, mu, 2) == pytest.approx(0.193, abs=1e-3)
    assert mean_waiting_time(lam, mu, 3) == pytest.approx(0.027, abs=1e-3)


rates = st.floats(1.0, 5e6)
per_core = st.floats(100.0, 5e5)
rho = st.floats(0.1, 30.0)
CAP = 300  # the policy caps workers (PolicyConfig.max_workers); the sizing search stops there too
chunk = st.integers(1, 50_000)
wait = st.floats(0.005, 2.0)


@given(rate=rates, pc=per_core, r=rho, c=chunk, w=wait)
def test_the_check_keeps_eq3_or_adds_the_fewest_workers_that_meet_the_wait(rate, pc, r, c, w) -> None:
    eq3 = workers_for(rate, pc, r, 0.7, sizing=EQ3, max_workers=CAP)
    assert eq3 == min(lambda_cores(rate, pc, r, 70.0), CAP)
    k = workers_for(rate, pc, r, 0.7, sizing=EQ3_MMK, chunk_events=c, chunk_wait_s=w, max_workers=CAP)
    lam, mu = rate / c, r * pc / c
    assert eq3 <= k <= CAP
    if k < CAP:
        assert mean_waiting_time(lam, mu, k) <= w
    if eq3 < k < CAP:  # it added workers only because one fewer would keep chunks waiting too long
        assert mean_waiting_time(lam, mu, k - 1) > w


@given(rate=rates, pc=per_core, r=rho, c=chunk, beta=st.floats(0.01, 0.99))
def test_es_stream_sizing_is_algorithm_1_on_chunks(rate, pc, r, c, beta) -> None:
    k = workers_for(rate, pc, r, 0.7, sizing=ES_STREAM, chunk_events=c, beta=beta, max_workers=CAP)
    assert 1 <= k <= CAP
    if lambda_cores(rate, pc, r, 70.0) < CAP and k < CAP:
        assert k == es_stream_servers(rate / c, r * pc / c, beta)
        assert k * r * pc > rate  # Algorithm 1 starts at the stability bound


def test_no_rate_needs_no_worker_and_the_policy_sizes_with_its_config() -> None:
    assert workers_for(0.0, PER_CORE, RHO, 0.7, sizing=EQ3_MMK) == 0
    cfg = PolicyConfig(per_core_rate=10_000, rho=2.0, trigger_periods=1, headroom=1.0)
    assert cfg.worker_sizing == EQ3_MMK  # the default
    policy = SpongePolicy(cfg)
    burst = Observation(0.0, 0.95, 14_000, 7_000, 0, 1.0, vm_cores=1, cost_ms=0.1)
    d = policy.decide(burst)
    # 7,000/s offloaded: Eq. 3 says 1 worker of 20,000/s; a 16,384-event chunk takes 0.82 s there, and
    # one worker at 35 % keeps it waiting 0.441 s on average, so the check asks for 2.
    assert (d.share, d.workers) == (pytest.approx(0.5), 2)
    assert SpongePolicy(PolicyConfig(**{**cfg.__dict__, "worker_sizing": EQ3})).decide(burst).workers == 1
    assert math.isclose(mean_waiting_time(7_000 / 16_384, 20_000 / 16_384, 1), 0.441, abs_tol=1e-3)


@pytest.mark.parametrize(
    "knob, value, says",
    [
        ("worker_sizing", "bigger", "worker sizing"),
        ("chunk_events", 0, "chunk_events"),
        ("chunk_wait_s", 0.0, "chunk_wait_s"),
        ("es_stream_beta", 1.0, "beta"),
    ],
)
def test_bad_sizing_knobs_are_refused(knob, value, says) -> None:
    with pytest.raises(ConfigError, match=says):
        PolicyConfig(per_core_rate=1.0, rho=1.0, **{knob: value})

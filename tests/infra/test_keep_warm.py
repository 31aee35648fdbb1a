"""Keep-warm on a deployed function (LocalStack): a burst after an idle period starts no cold worker when
the agent keeps its pool warm, and starts cold ones when it does not.

LocalStack here reclaims an execution environment after KEEPALIVE_S idle seconds (its LAMBDA_KEEPALIVE_MS,
600 s by default, shortened so the test idles seconds rather than minutes); ADR 0039 has the default's
measurement. Each case starts the real agent process with the boto3 invoker against template.yaml's
function, lets it warm its pool (--prewarm, the warm-ups of router/invokers/lambda_api.py), idles for
longer than LocalStack keeps an idle environment, and then sends a burst of chunks that makes the fleet
invoke WORKERS workers: their sessions' Hellos say cold or warm, counted by the agent as cold_starts and
warm_starts (summary.json's figures).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.deployment import Deployment
from core.nexmark.generator import GeneratorConfig, generate
from infra.deploy.stack import DeployConfig, deploy
from router import stats
from router.agent_process import AgentProcess, AgentProcessConfig, LambdaFunction, write_secret
from router.client import AgentClient
from tests.infra.localstack_env import running_localstack
from tests.router.conftest import Q7

KEEPALIVE_S = 5.0  # LocalStack reclaims an environment idle this long
KEEP_WARM_S = 1.5  # well inside it
IDLE_S = 3 * KEEPALIVE_S  # the quiet time before the burst: every unpinged environment is gone by then
WORKERS = 2

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def deployed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    root = tmp_path_factory.mktemp("keep-warm")
    keepalive = (("LAMBDA_KEEPALIVE_MS", str(int(KEEPALIVE_S * 1000))),)
    with running_localstack(root / "localstack", extra_env=keepalive) as (_, handle):
        yield deploy(
            DeployConfig.for_target(
                "localstack", endpoint_url=handle.endpoint, stack_name="kw", stack_dir=root / "sponge"
            )
        )


def _burst(client: AgentClient) -> None:
    """WORKERS chunks at once: the fleet invokes a worker for each."""
    bids = generate(GeneratorConfig(seed=3, events=4_000), "bid", 0, 4_000)
    threads = [
        threading.Thread(target=client.offload, args=(1, part, 0, Q7, bids), daemon=True)
        for part in range(WORKERS)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def _until(client: AgentClient, done: Any, timeout_s: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while True:
        s = client.stats()
        if done(s) or time.monotonic() > deadline:
            return s
        time.sleep(0.1)


def _burst_after_idle(deployment: Deployment, tmp_path: Path, keep_warm_s: float | None) -> dict[str, Any]:
    fn = LambdaFunction(
        deployment.function_name,
        deployment.region,
        deployment.qualifier,
        deployment.endpoint_url,
        tuple(deployment.agent_env().items()),
    )
    secret = write_secret(tmp_path / "secret")
    config = AgentProcessConfig(
        secret_file=secret,
        max_workers=WORKERS,
        function=fn,
        prewarm=WORKERS,
        keep_warm_s=keep_warm_s,
        idle_timeout_s=1.0,
        local_fallback_s=30.0,  # the burst's chunks wait for the workers, cold or warm
        function_timeout_s=deployment.function_timeout_s,
        log_path=tmp_path / "workers.log",
    )
    with AgentProcess(config) as agent:
        assert agent.wait_warm(WORKERS, 60), "the pool did not warm"
        client = AgentClient(agent.address, secret.read_text().strip().encode(), timeout_s=60)
        try:
            time.sleep(IDLE_S)
            if keep_warm_s:  # burst just after a round, not into one (a ping holds its environment)
                pings = client.stats()[stats.KEEP_WARM_PINGS]
                _until(client, lambda s: s[stats.KEEP_WARM_PINGS] > pings, 3 * keep_warm_s)
            _burst(client)
            started = client.stats()[stats.WORKERS_STARTED]
            final = _until(client, lambda s: s[stats.COLD_STARTS] + s[stats.WARM_STARTS] >= started, 30)
        finally:
            client.close()
    starts = {k: v for k, v in sorted(final.items()) if "start" in k or "warm" in k}
    print(f"\nkeep-warm {keep_warm_s}: {starts}")
    return final


def test_a_burst_after_an_idle_period_starts_no_cold_worker_with_keep_warm(
    deployed: Deployment, tmp_path: Path
) -> None:
    s = _burst_after_idle(deployed, tmp_path, KEEP_WARM_S)
    assert s[stats.WORKERS_PREWARMED] == WORKERS
    assert s[stats.KEEP_WARM_PINGS] >= WORKERS * 2, "rounds went on while the agent was idle"
    assert s[stats.KEEP_WARM_COLD] == 0, "no pinged environment had been reclaimed"
    assert s[stats.WORKERS_STARTED] >= 1 and s[stats.COLD_STARTS] == 0
    assert s[stats.WARM_STARTS] == s[stats.WORKERS_STARTED]


def test_without_keep_warm_the_same_burst_starts_cold_workers(deployed: Deployment, tmp_path: Path) -> None:
    s = _burst_after_idle(deployed, tmp_path, None)
    assert s[stats.WORKERS_PREWARMED] == WORKERS and s[stats.KEEP_WARM_PINGS] == 0
    assert s[stats.WORKERS_STARTED] >= 1
    assert s[stats.COLD_STARTS] == s[stats.WORKERS_STARTED] and s[stats.WARM_STARTS] == 0

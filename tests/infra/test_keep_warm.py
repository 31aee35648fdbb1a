"""Keep-warm on a deployed function (LocalStack): a burst after an idle period starts no cold worker when
the agent keeps its pool warm, and starts cold ones when it does not.

LocalStack here reclaims an execution environment after KEEPALIVE_S idle seconds (its LAMBDA_KEEPALIVE_MS,
600 s by default, shortened so the test idles seconds rather than minutes); ADR 0039 has the default's
measurement. Each case starts the real agent process with the boto3 invoker against template.yaml's
function, lets it warm its pool (--prewarm, the warm-ups of router/invokers/lambda_api.py), idles for
longer than LocalStack keeps an idle environment, and then sends a burst of chunks that makes the fleet
invoke WORKERS workers: their sessions' Hellos say cold or warm, counted by the agent as cold_starts and
warm_starts. The agent is the one a run starts (OffloadSession, from OffloadConfig's keep_warm_s, as
`sponge run --keep-warm` sets it), and the figures asserted are the offload fields of its summary.json.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from core.nexmark.generator import GeneratorConfig, generate
from core.nexmark.params import QueryParams
from core.spark.offload_session import OffloadConfig, OffloadSession
from infra.deploy.stack import DeployConfig, deploy
from router import stats
from router.client import AgentClient
from tests.infra.localstack_env import running_localstack
from tests.router.conftest import Q7

KEEPALIVE_S = 5.0  # LocalStack reclaims an environment idle this long
KEEP_WARM_S = 1.5  # well inside it
IDLE_S = 3 * KEEPALIVE_S  # the quiet time before the burst: every unpinged environment is gone by then
WORKERS = 2

pytestmark = [pytest.mark.solo, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def localstack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """LocalStack of its own with a short idle lifetime: its endpoint, and a directory for stack files."""
    root = tmp_path_factory.mktemp("keep-warm")
    keepalive = (("LAMBDA_KEEPALIVE_MS", str(int(KEEPALIVE_S * 1000))),)
    with running_localstack(root / "localstack", extra_env=keepalive) as (_, handle):
        yield handle.endpoint, root / "sponge"


def _deployed(localstack: tuple[str, Path]) -> Path:
    """template.yaml deployed (again) just before the agent starts: workers must run the agent's build,
    and the sources may have changed since the last case."""
    endpoint, stack_dir = localstack
    deploy(DeployConfig.for_target("localstack", endpoint_url=endpoint, stack_name="kw", stack_dir=stack_dir))
    return stack_dir


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


def _burst_after_idle(
    localstack: tuple[str, Path], tmp_path: Path, keep_warm_s: float | None
) -> dict[str, Any]:
    """The offload fields of the run's summary.json: the run's own agent (OffloadSession, as `sponge run
    --target localstack --keep-warm S` starts it; no Spark), a quiet spell, then a burst."""
    config = OffloadConfig(
        share=0.5,
        workers=WORKERS,
        target="localstack",
        stack_dir=_deployed(localstack),
        prewarm=WORKERS,
        keep_warm_s=keep_warm_s,
        idle_timeout_s=1.0,
    )
    session = OffloadSession(config, tmp_path / "out", "q7", QueryParams())
    session.start()  # returns once the pool is warm
    try:
        agent = session.agent
        secret = session.secret_file.read_text().strip().encode()
        client = AgentClient(agent.address, secret, timeout_s=60, tls=agent.config.tls())
        try:
            assert client.stats()[stats.WORKERS_PREWARMED] == WORKERS, "the pool did not warm"
            time.sleep(IDLE_S)
            if keep_warm_s:  # burst just after a round, not into one (a ping holds its environment)
                pings = client.stats()[stats.KEEP_WARM_PINGS]
                _until(client, lambda s: s[stats.KEEP_WARM_PINGS] > pings, 3 * keep_warm_s)
            _burst(client)
            started = client.stats()[stats.WORKERS_STARTED]
            _until(client, lambda s: s["cold_starts"] + s["warm_starts"] >= started, 30)
        finally:
            client.close()
    finally:
        summary = session.stop()
    starts = {k: v for k, v in sorted(summary.items()) if "start" in k or "warm" in k}
    print(f"\nkeep-warm {keep_warm_s}: {starts}")
    return summary


def test_a_burst_after_an_idle_period_starts_no_cold_worker_with_keep_warm(
    localstack: tuple[str, Path], tmp_path: Path
) -> None:
    s = _burst_after_idle(localstack, tmp_path, KEEP_WARM_S)
    assert s["workers_prewarmed"] == WORKERS
    assert s["keep_warm_pings"] >= WORKERS * 2, "rounds went on while the agent was idle"
    assert s["keep_warm_cold"] == 0, "no pinged environment had been reclaimed"
    assert s["workers_started"] >= 1 and s["cold_starts"] == 0
    assert s["warm_starts"] == s["workers_started"]


def test_without_keep_warm_the_same_burst_starts_cold_workers(
    localstack: tuple[str, Path], tmp_path: Path
) -> None:
    s = _burst_after_idle(localstack, tmp_path, None)
    assert s["workers_prewarmed"] == WORKERS and s["keep_warm_pings"] == 0
    assert s["workers_started"] >= 1
    assert s["cold_starts"] == s["workers_started"] and s["warm_starts"] == 0

"""Fixtures for the router tests: agents bound to 127.0.0.1 that are always stopped."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest

from core.nexmark.generator import GeneratorConfig, generate
from lambda_worker.program import ProgramSpec
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.dispatcher import DispatchConfig
from router.fleet import FleetConfig
from router.invokers.base import Invoker

Q5 = ProgramSpec("q5", ("map1", "key_by2", "window_aggregate3"))
Q7 = ProgramSpec("q7", ("key_by1", "window_aggregate2"))


@pytest.fixture
def secret() -> bytes:
    return secrets.token_hex(16).encode()


@pytest.fixture
def make_agent(secret: bytes) -> Iterator[Callable[..., AgentServer]]:
    agents: list[AgentServer] = []

    def make(
        invoker: Invoker | None,
        *,
        dispatch: dict[str, Any] | None = None,
        agent: dict[str, Any] | None = None,
        **fleet: Any,
    ) -> AgentServer:
        config = AgentConfig(
            secret=secret,
            host="127.0.0.1",
            **(agent or {}),
            dispatch=DispatchConfig(
                **{"local_fallback_s": 10.0, "chunk_timeout_s": 30.0, **(dispatch or {})}
            ),
            fleet=FleetConfig(**{"max_workers": 2, "idle_timeout_s": 5.0, "safety_margin_s": 1.0, **fleet}),
        )
        agent = AgentServer(config, invoker)
        agent.start()
        agents.append(agent)
        return agent

    yield make
    for a in agents:
        a.stop(grace_s=0.5)


def bids(events: int, seed: int = 3) -> pa.Table:
    return pa.Table.from_batches([generate(GeneratorConfig(seed=seed, events=events), "bid", 0, events)])


def sorted_rows(table: pa.Table) -> list[dict[str, Any]]:
    return sorted(table.to_pylist(), key=repr)

"""The agent and its workers on two networks, as a VM and Lambda are: the workers reach the agent
only at its advertised address, over TLS (and mutual TLS), and the chunks come back exact.

The workers' network is a Linux network namespace joined to this one by a veth pair; the test is
skipped where namespaces cannot be made (no root, no `ip`)."""

from __future__ import annotations

import secrets
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.wire.protocol import ChannelTls
from core.wire.run_pki import make_server_pki
from router.agent.config import AgentConfig
from router.agent.server import AgentServer
from router.client import AgentClient
from router.dispatcher import DispatchConfig
from router.fleet import FleetConfig
from router.invokers.embedded import EmbeddedFleet, EmbeddedFleetConfig
from tests.router.conftest import Q5, bids, sorted_rows

pytestmark = [pytest.mark.solo, pytest.mark.slow, pytest.mark.timeout(120)]
VM, LAMBDA = "10.231.7.1", "10.231.7.2"


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


@pytest.fixture
def lambda_net() -> Iterator[str]:
    """A network namespace for the workers, joined to this one by a veth pair (VM <-> LAMBDA)."""
    if shutil.which("ip") is None:
        pytest.skip("no `ip` command to make a network namespace")
    name, tag = f"sponge-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:5]
    vm_end, lambda_end = f"spv{tag}", f"spl{tag}"
    try:
        _ip("netns", "add", name)
    except subprocess.CalledProcessError as e:
        pytest.skip(f"cannot make a network namespace here: {e.stderr.strip()}")
    try:
        _ip("link", "add", vm_end, "type", "veth", "peer", "name", lambda_end)
        _ip("link", "set", lambda_end, "netns", name)
        _ip("addr", "add", f"{VM}/24", "dev", vm_end)
        _ip("link", "set", vm_end, "up")
        _ip("netns", "exec", name, "ip", "addr", "add", f"{LAMBDA}/24", "dev", lambda_end)
        _ip("netns", "exec", name, "ip", "link", "set", lambda_end, "up")
        _ip("netns", "exec", name, "ip", "link", "set", "lo", "up")
        yield name
    finally:
        subprocess.run(["ip", "link", "del", vm_end], capture_output=True, timeout=10)
        subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=10)


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_workers_on_another_network_reach_the_agent_at_its_advertised_address_over_tls(
    lambda_net: str, tmp_path: Path, mutual: bool
) -> None:
    tls_dir = make_server_pki([VM], mutual=mutual).write(tmp_path / "tls")
    secret = secrets.token_hex(16).encode()
    fleet = EmbeddedFleet(
        EmbeddedFleetConfig(concurrency_limit=1, launcher=("ip", "netns", "exec", lambda_net))
    )
    config = AgentConfig(
        secret=secret,
        host=VM,  # listens on the VM's side of the link only: loopback in the workers' network is not it
        advertise_address=None,
        tls_dir=tls_dir,
        dispatch=DispatchConfig(local_fallback_s=60.0, chunk_timeout_s=60.0),  # from a worker, not the agent
        fleet=FleetConfig(max_workers=1, idle_timeout_s=5.0),
    )
    data = bids(4_000)
    with (
        AgentServer(config, fleet) as agent,
        AgentClient(agent.address, secret, tls=ChannelTls.read(tls_dir)) as c,
    ):
        result = c.offload(1, 2, 0, Q5, data)
    assert agent.address.startswith(VM + ":")
    assert not result.ran_locally and result.worker_id
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))

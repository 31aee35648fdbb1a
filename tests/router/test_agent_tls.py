"""TLS on the data plane: workers and VM-side callers reach a TLS agent; plaintext and strangers cannot."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.wire.protocol import CA_FILE, ChannelTls
from core.wire.run_pki import make_server_pki, own_server_pki
from router.client import AgentClient, OffloadError
from tests.core.wire.test_run_pki import own_pki
from tests.router.conftest import Q5, bids, sorted_rows
from tests.router.fakes import ThreadInvoker


@pytest.fixture
def tls_dir(tmp_path: Path) -> Path:
    return make_server_pki(["127.0.0.1", "localhost"]).write(tmp_path / "tls")


def test_workers_and_callers_that_trust_the_runs_ca_offload_over_tls(make_agent, secret, tls_dir) -> None:  # type: ignore[no-untyped-def]
    agent = make_agent(ThreadInvoker(), agent={"tls_dir": tls_dir}, dispatch={"local_fallback_s": 30.0})
    data = bids(5_000)
    with AgentClient(agent.address, secret, tls=ChannelTls.read(tls_dir)) as client:
        result = client.offload(1, 2, 0, Q5, data)
    # A worker (the real handler, told the CA in its descriptor) dialled back over TLS and ran it.
    assert not result.ran_locally and result.worker_id
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))


@pytest.mark.parametrize("caller", ["plaintext", "another CA", "no secret"])
def test_plaintext_strangers_and_callers_without_the_secret_are_refused(  # type: ignore[no-untyped-def]
    make_agent, secret, tls_dir, caller
) -> None:
    agent = make_agent(None, agent={"tls_dir": tls_dir})
    ca = {
        "plaintext": None,
        "another CA": make_server_pki(["127.0.0.1"]).ca_pem,
        "no secret": (tls_dir / CA_FILE).read_bytes(),
    }[caller]
    shown = b"not-the-secret-at-all" if caller == "no secret" else secret
    tls = ChannelTls(ca) if ca is not None else None
    client = AgentClient(agent.address, shown, tls=tls, timeout_s=2.0, retry_budget_s=1.0)
    with client, pytest.raises(OffloadError) as e:
        client.offload(1, 2, 0, Q5, bids(500))
    # Without a handshake no call is made: the client's wait for a connection runs out.
    expected = {"UNAUTHENTICATED"} if caller == "no secret" else {"UNAVAILABLE", "DEADLINE_EXCEEDED"}
    assert e.value.code in expected, e.value


def test_mutual_tls_takes_each_worker_with_its_own_certificate_and_refuses_callers_without_one(  # type: ignore[no-untyped-def]
    make_agent, secret, tmp_path
) -> None:
    tls_dir = make_server_pki(["127.0.0.1"], mutual=True).write(tmp_path / "mtls")
    agent = make_agent(ThreadInvoker(), agent={"tls_dir": tls_dir}, dispatch={"local_fallback_s": 30.0})
    data = bids(3_000)
    with AgentClient(agent.address, secret, tls=ChannelTls.read(tls_dir)) as client:
        result = client.offload(1, 2, 0, Q5, data)
    assert not result.ran_locally and result.worker_id  # a worker dialled in with its certificate
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))
    issued = agent.fleet.descriptor("w-test", None)
    assert issued.tls_cert and issued.tls_key and issued.tls_cert != (tls_dir / "client.pem").read_text()
    # The run's CA trusted, but no certificate shown: no handshake.
    server_only = ChannelTls((tls_dir / CA_FILE).read_bytes())
    client = AgentClient(agent.address, secret, tls=server_only, timeout_s=2.0, retry_budget_s=1.0)
    with client, pytest.raises(OffloadError) as e:
        client.offload(1, 3, 0, Q5, bids(500))
    assert e.value.code in {"UNAVAILABLE", "DEADLINE_EXCEEDED"}, e.value


@pytest.mark.parametrize("mutual", [False, True], ids=["tls", "mtls"])
def test_an_agent_serves_the_users_certificates_and_its_workers_trust_them(  # type: ignore[no-untyped-def]
    make_agent, secret, tmp_path, mutual
) -> None:
    tls_dir = own_server_pki(own_pki(tmp_path / "mine", ("127.0.0.1",)), "127.0.0.1", mutual).write(
        tmp_path / "run"
    )
    agent = make_agent(ThreadInvoker(), agent={"tls_dir": tls_dir}, dispatch={"local_fallback_s": 30.0})
    data = bids(3_000)
    with AgentClient(agent.address, secret, tls=ChannelTls.read(tls_dir)) as client:
        result = client.offload(1, 2, 0, Q5, data)
    assert not result.ran_locally and result.worker_id  # a worker dialled in, trusting the user's CA
    assert sorted_rows(result.table) == sorted_rows(Q5.compile().run_table(data))

"""Where a run's agent listens, what its workers dial and how they talk, when nobody says."""

from __future__ import annotations

import pytest

from core.errors import ConfigError
from core.net import is_loopback, routable_address
from core.spark.offload_session import OffloadConfig


def test_the_embedded_target_stays_on_loopback_in_plaintext() -> None:
    c = OffloadConfig(share=0.5)
    assert (c.bind, c.advertise, c.transport) == ("127.0.0.1", "127.0.0.1", "plaintext")


def test_an_agent_listening_everywhere_advertises_the_routable_address_over_tls() -> None:
    c = OffloadConfig(share=0.5, bind="0.0.0.0")
    assert c.advertise == routable_address() and not is_loopback(c.advertise)
    assert c.transport == "tls"


def test_an_advertised_address_and_transport_given_are_kept() -> None:
    c = OffloadConfig(share=0.5, bind="0.0.0.0", advertise="10.0.3.7", transport="plaintext")
    assert (c.advertise, c.transport) == ("10.0.3.7", "plaintext")


def test_an_unknown_transport_says_which_there_are() -> None:
    with pytest.raises(ConfigError, match="unknown transport 'ssl'") as e:
        OffloadConfig(share=0.5, transport="ssl")
    assert "tls" in e.value.hint and "plaintext" in e.value.hint


@pytest.mark.parametrize(
    ("host", "loopback"),
    [("127.0.0.1", True), ("::1", True), ("localhost", True), ("192.0.2.2", False), ("vm.internal", False)],
)
def test_loopback_is_what_no_other_machine_can_reach(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback

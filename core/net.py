"""Where this machine is on the network: what another machine dials to reach it, and what no other
machine can reach at all (the VM agent's defaults, core/spark/offload_session.py)."""

from __future__ import annotations

import ipaddress
import socket

from core.errors import ConfigError


def routable_address() -> str:
    """This machine's address on its default route: what another machine of its network dials.

    A UDP socket's connect sends nothing; it only picks the interface the route goes out of.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # TEST-NET-1: any address off this machine would do
            return str(s.getsockname()[0])
        except OSError as e:
            raise ConfigError(
                f"cannot tell this machine's routable address ({e.strerror})",
                hint="pass --advertise HOST: the address workers reach this machine at",
            ) from None


def is_loopback(host: str) -> bool:
    """Whether `host` is reachable from this machine only (no other machine can be on its path)."""
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"

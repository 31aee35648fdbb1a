"""The routed read's options: how much an epoch may cover while a share is offloaded (ADR 0008)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.errors import ConfigError
from router.source_router import RouteOptions


def test_an_offloaded_share_lets_an_epoch_cover_more_offsets_for_the_same_vm_work() -> None:
    """offload_cost 0.25: at share 0.8 an offset costs the VM 0.2 + 0.8 x 0.25 = 0.4 of a kept one,
    so the epoch may cover 2.5x the offsets; nothing offloaded, nothing changes."""
    route = RouteOptions.parse({"route": "local", "offload_dir": "/tmp/x", "offload_cost": "0.25"})
    assert route is not None
    assert route.batch_scale(0.0) == 1.0
    assert route.batch_scale(0.8) == pytest.approx(2.5)
    assert RouteOptions(route="local", offload_dir=Path("/x"), offload_cost=0.0).batch_scale(1.0) == 20.0


def test_a_bad_offload_cost_is_refused() -> None:
    with pytest.raises(ConfigError, match="offload_cost"):
        RouteOptions.parse({"route": "local", "offload_dir": "/tmp/x", "offload_cost": "-1"})

"""What held a policy back in a burst: its epochs measured against the cap their source computed."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.drill import capacity_use
from core.drill.drill import _epoch_caps
from core.drill.run_policy import PolicyRun
from core.latency import Epoch
from core.offload_plan import OffloadPlan
from core.spark.session import MemoryConfig
from router.routing_log import RoutingLog

ORIGIN = 1_000.0


def _epochs(*sizes_at: tuple[float, int]) -> list[Epoch]:
    out, offset = [], 0
    for started_s, size in sizes_at:
        out.append(Epoch(ORIGIN + started_s, ORIGIN + started_s + 1.0, offset, offset + size))
        offset += size
    return out


def test_the_share_of_burst_epochs_full_at_their_cap_and_their_median_cap() -> None:
    epochs = _epochs((5.0, 90_000), (20.0, 200_000), (21.0, 199_000), (22.0, 150_000), (23.0, 495_000))
    caps = [200_000, 200_000, 200_000, 200_000, 500_000]
    held = capacity_use.held_by_cap(epochs, caps, ORIGIN, 20.0, 30.0)
    # 199,000 is within 2 % of its cap; 150,000 is not; the epoch before the burst is not counted.
    assert held == {"share": 0.75, "cap_events": 200_000.0}
    assert capacity_use.held_by_cap(epochs, caps, ORIGIN, 40.0, 50.0) is None
    with pytest.raises(ValueError):
        capacity_use.held_by_cap(epochs, caps[:2], ORIGIN, 20.0, 30.0)


def _spec(tmp_path: Path, offload: bool) -> PolicyRun:
    return PolicyRun(
        policy="sponge" if offload else "noscaling",
        query="q5",
        events=1_000_000,
        seed=0,
        schedule="10:1000",
        output=str(tmp_path / "output"),
        master="standalone",
        vm_cpus=[0],
        memory=MemoryConfig(driver_mb=1024),
        batch_events=200_000,
        offload=offload,
    )


def test_a_routed_epochs_cap_grows_with_the_share_of_the_plan_that_routed_it(tmp_path: Path) -> None:
    log_dir = tmp_path / "_offload"
    log = RoutingLog(log_dir)
    log.plan_range(0, 300_000, OffloadPlan.local(1))
    log.plan_range(300_000, 900_000, OffloadPlan.of_share(2, 0.5, 2))
    epochs = _epochs((18.0, 150_000), (19.0, 150_000), (20.0, 300_000), (21.0, 300_000))
    result = {"epochs": [e.__dict__ for e in epochs]}
    # Share 0.5 at the floor's offload cost of 0.1: the VM's work per offset is 0.55 of a kept one's.
    assert _epoch_caps(_spec(tmp_path, True), result, log_dir) == [200_000, 200_000, 363_636, 363_636]
    assert _epoch_caps(_spec(tmp_path, False), result, log_dir) == [200_000] * 4
    # A run whose VMs changed, or that read a stream, has no single cap to compare with.
    assert _epoch_caps(_spec(tmp_path, True), {**result, "vm_actions": [{"t": 3.0}]}, log_dir) is None
    assert _epoch_caps(_spec(tmp_path, True), {**result, "stream": "s"}, log_dir) is None


def test_a_run_without_a_routing_log_gets_no_offload_directory(tmp_path: Path) -> None:
    result = {"epochs": [e.__dict__ for e in _epochs((1.0, 10), (2.0, 10))]}
    assert _epoch_caps(_spec(tmp_path, True), result, tmp_path / "_offload") == [200_000, 200_000]
    assert not (tmp_path / "_offload").exists()

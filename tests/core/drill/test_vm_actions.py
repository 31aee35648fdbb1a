"""The VM side of a drill without Spark: when VMBase/VMInit ask for a VM, how the persistent rule's
requests reach the pool, how the loop runs a VM action, and how VM time and reaction are reported."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from typing import Any

import psutil
import pytest

from core.drill import drill, run_policy
from core.drill.report_numbers import handover_clause
from core.drill.vm_actions import PersistentVms, ScaleOnBurst, overloaded
from core.errors import ConfigError
from core.nexmark.patterns import BurstPattern
from policy.cost_model import PersistentBurstConfig, Prices, fleet_cost_usd, vm_cost_usd
from policy.loop import PolicyLoop
from policy.monitor import Observation, ProcessTreeCpu
from policy.offload_policy import NO_GAIN, Decision
from policy.persistent_burst import PersistentBurstRule


def obs(t: float, rate: float = 10_000.0) -> Observation:
    return Observation(t, 0.9, rate, rate, 0, 1.0, vm_cores=1, cost_ms=0.1)


def decision(t: float, share: float, trigger: str = "input-rate", workers: int = 2) -> Decision:
    return Decision(t, share, workers if share else 0, trigger, 7_000.0, 20_000.0, 0.0, 10_000.0)


class FakePool:
    """Counts like VmPool: base VMs usable from the start, requests pending until `arrive()`."""

    def __init__(self, base: int = 1) -> None:
        self.base, self.added, self.waiting = base, 0, 0
        self.calls: list[tuple[str, int, float]] = []

    def request(self, n: int, delay_s: float) -> list[int]:
        self.calls.append(("request", n, delay_s))
        self.waiting += n
        return []

    def release(self, n: int) -> int:
        self.calls.append(("release", n, 0.0))
        gone = min(n, self.added)
        self.added -= gone
        return gone

    def arrive(self) -> None:
        self.added, self.waiting = self.added + self.waiting, 0

    def usable(self) -> int:
        return self.base + self.added

    def pending(self) -> int:
        return self.waiting


def test_vmbase_asks_once_at_the_first_decision_that_would_offload() -> None:
    pool = FakePool()
    action = ScaleOnBurst(pool, vms=1, launch_delay_s=25.0)
    assert not overloaded(None) and not overloaded(decision(1, 0.0, "hold"))
    assert not overloaded(decision(1, 0.0, "cpu"))  # a signal with nothing to offload is not a burst
    assert overloaded(decision(1, 0.0, NO_GAIN))  # a burst that offloading cannot relieve still is one
    assert not overloaded(decision(1, 0.3, "hold"))  # still offloading, no signal: the burst was seen
    action(obs(1), decision(1, 0.0, "hold"))
    action(obs(2), None)
    assert pool.calls == []
    action(obs(3), decision(3, 0.4, "queue-delay"))
    action(obs(4), decision(4, 0.6, "input-rate"))  # no second VM within a drill
    assert pool.calls == [("request", 1, 25.0)]
    (event,) = action.events
    assert event["t"] == 3 and event["add"] == 1 and "queue-delay" in event["reason"]


def rule(**kw: Any) -> PersistentBurstRule:
    config = PersistentBurstConfig(launch_delay_s=10.0, handover_s=2.0)
    args = {"per_core_rate": 10_000.0, "rho": 0.4, "cores_per_vm": 1, "base_vms": 1, "max_new_vms": 1, **kw}
    return PersistentBurstRule(config, run_policy.vm_prices(1), **args)


def test_the_persistent_rule_buys_a_vm_for_a_long_burst_and_the_pool_counts_added_vms_only() -> None:
    pool = FakePool(base=1)
    action = PersistentVms(rule(), pool, base_vms=1, launch_delay_s=3.0)
    logged = [action(obs(t, 20_000.0), decision(t, 0.6)) for t in range(0, 200)]
    # rho 0.4: a Lambda core does less than the VM core it would be replaced by, and costs more
    assert ("request", 1, 3.0) in pool.calls
    bought = next(i for i, entry in enumerate(logged) if entry and entry["vm_request"] is not None)
    assert logged[bought]["vms_usable"] == 0  # the base VM is not the rule's
    assert logged[bought + 1]["vms_pending"] == 1
    assert len([c for c in pool.calls if c[0] == "request"]) == 1  # never repeated while pending
    assert action(obs(300), None) is None


def test_once_the_bought_vm_holds_the_burst_the_idle_workers_are_released_once_per_hand_over() -> None:
    pool = FakePool(base=1)
    released: list[tuple[int, str]] = []

    def release(keep: int, reason: str) -> int:
        released.append((keep, reason))
        return 3

    action = PersistentVms(rule(), pool, base_vms=1, launch_delay_s=3.0, release_workers=release)
    action(obs(0, 20_000.0), decision(0, 0.6))
    action(obs(1, 20_000.0), decision(1, 0.0))  # nothing offloaded, but no VM bought: nothing to release
    assert released == []
    pool.waiting = 1
    pool.arrive()  # the bought VM is usable ...
    action(obs(2, 20_000.0), decision(2, 0.3))  # ... while the policy still offloads: the workers stay
    assert released == []
    action(obs(3, 20_000.0), decision(3, 0.0))  # the VM holds the load: the workers go, once
    action(obs(4, 20_000.0), decision(4, 0.0))
    assert released == [(0, "the burst is on the bought VMs")]
    assert {"t": 3, "workers_released": 3} in action.events
    action(obs(5, 20_000.0), decision(5, 0.5))  # the burst grows past the VM: workers are back
    action(obs(6, 20_000.0), decision(6, 0.0))  # and go again once it holds
    assert len(released) == 2


def test_the_loop_runs_the_vm_action_each_second_and_keeps_its_failures() -> None:
    class Monitor:
        def __init__(self) -> None:
            self.t = 0.0

        def mark(self) -> None:
            pass

        def observe(self) -> Observation:
            self.t += 1
            return obs(self.t)

    seen: list[float] = []
    done = threading.Event()

    def action(o: Observation, d: Decision | None) -> None:
        seen.append(o.t)
        if len(seen) == 2:
            raise RuntimeError("no VM today")
        if len(seen) >= 4:
            done.set()

    loop = PolicyLoop(
        monitor=Monitor(), policy=None, apply=lambda d: None, log=None, interval_s=0.01, vm_action=action
    )
    loop.start()
    assert done.wait(10)
    loop.stop()
    assert seen[:4] == [1.0, 2.0, 3.0, 4.0]  # the failure did not stop the loop
    assert loop.errors and "no VM today" in loop.errors[0] and "t=2.0s" in loop.errors[0]


def vm(
    index: int,
    *,
    base: bool = False,
    warm: bool = False,
    requested: float | None = None,
    usable: float | None = None,
    released: float | None = None,
) -> dict[str, Any]:
    return {
        "vm": index,
        "cores": 1,
        "base": base,
        "warm": warm,
        "state": "usable",
        "executor_ids": [str(index)],
        "requested_s": requested,
        "worker_launched_s": None,
        "worker_registered_s": 20.0,
        "usable_s": usable,
        "released_s": released,
        "request_to_usable_s": None if usable is None or requested is None else usable - requested,
    }


def test_a_drill_vm_is_priced_as_its_share_of_the_list_vm() -> None:
    one = run_policy.vm_prices(1)
    assert one.vm_cores == 1 and one.vm_usd_per_hour == pytest.approx(Prices().vm_usd_per_hour / 4)
    assert one.vm_minimum_billed_s == Prices().vm_minimum_billed_s


def test_vm_time_is_billed_from_the_request_and_a_preinitialised_vm_for_the_whole_trace() -> None:
    prices = Prices()
    base = vm_cost_usd(1 / 4, 90.0, prices=prices)
    assert drill._vm_cost({}, 1, 90.0, prices) == pytest.approx(base)
    vmbase = {"vms": [vm(0, base=True, requested=-40), vm(1, requested=30.0, usable=45.0)]}
    added = vm_cost_usd(1 / 4, 60.0, prices=prices)
    assert drill._vm_cost(vmbase, 1, 90.0, prices) == pytest.approx(base + added)
    vminit = {"vms": [vm(0, base=True), vm(1, warm=True, requested=30.0, usable=34.0)]}
    assert drill._vm_cost(vminit, 1, 90.0, prices) == pytest.approx(2 * base)
    released = {"vms": [vm(0, base=True), vm(1, requested=10.0, usable=20.0, released=40.0)]}
    assert drill._vm_cost(released, 1, 90.0, prices) == pytest.approx(
        base + vm_cost_usd(1 / 4, 30.0, prices=prices)
    )


def test_vm_reaction_and_notes_come_from_the_vm_timeline() -> None:
    trace = BurstPattern.parse("sudden:2x:30s").trace(10_000.0, 90.0, 30.0)
    result = {
        "vms": [vm(0, base=True, requested=-40, usable=-20), vm(1, requested=30.8, usable=44.3)],
        "vm_actions": [
            {"t": 30.8, "add": 1, "release": 0, "reason": "overloaded (input-rate)"},
            {"t": 61.0, "workers_released": 3},
            {"t": 80.2, "add": 0, "release": 1, "released": 1, "reason": "the burst has passed"},
        ],
        "executors": [{"id": "0", "completed_tasks": 120}, {"id": "1", "completed_tasks": 45}],
    }
    assert drill._vm_reaction(result, trace) == pytest.approx(14.3)
    notes = drill._notes(result)
    assert "VM requested at 30.8 s" in notes and "executor usable at 44.3 s" in notes
    assert "3 idle workers released at 61.0 s" in notes and "VM released at 80.2 s" in notes
    assert "120 / 45" in notes
    never = {"vms": [vm(0, base=True), vm(1, requested=31.0)]}
    assert drill._vm_reaction(never, trace) is None
    assert "never became usable" in drill._notes(never)


def test_sfbase_runs_where_state_moves_by_key_and_is_refused_with_why_elsewhere() -> None:
    with pytest.raises(ConfigError) as refused:
        drill.DrillConfig(query="q7", policies=("vmbase", "sfbase"))
    assert "cannot run q7 live" in refused.value.message and "merge operators" in refused.value.message
    assert "sponge simulate --compare sfbase --query q7" in refused.value.hint
    config = drill.DrillConfig(query="q5", policies=("sponge", "sfbase"))
    trace = BurstPattern.parse(config.pattern).trace(10_000.0, config.duration_s, config.lead_s)
    sfbase = drill._spec(config, "sfbase", trace, 1.0, routed=True)
    assert sfbase.ablation == "sfbase" and sfbase.offload and sfbase.controlled and not sfbase.persistent
    assert sfbase.prewarm == config.max_workers  # warm as Sponge's workers (paper 6.1)
    sponge = drill._spec(config, "sponge", trace, 1.0, routed=True)
    assert sponge.ablation is None and sponge.persistent
    # Where offloading does not pay (a calibration of Q3 put an offloaded event at 2x a kept one), sponge
    # watches the plain plan: no workers, so no persistent burst to hand to a VM, and the run is valid.
    plain = drill._spec(config, "sponge", trace, 1.0, routed=False)
    assert plain.controlled and not plain.offload and not plain.persistent
    with pytest.raises(ConfigError, match="launch delay"):
        drill.DrillConfig(policies=("vmbase",), vm_launch_delay_s=-1.0)
    config = drill.DrillConfig(policies=("noscaling", "vmbase", "vminit"), vm_launch_delay_s=3.0)
    trace = BurstPattern.parse(config.pattern).trace(10_000.0, config.duration_s, config.lead_s)
    vmbase = drill._spec(config, "vmbase", trace, 1.0, routed=False)
    vminit = drill._spec(config, "vminit", trace, 1.0, routed=False)
    local = drill._spec(config, "noscaling", trace, 1.0, routed=False)
    assert vmbase.standalone and vmbase.controlled and not vmbase.offload and vmbase.vms_on_burst == 1
    assert vmbase.vm_launch_delay_s == 3.0 and vmbase.warm_vms == 0 and vminit.warm_vms == 1
    # Every policy on the same standalone deployment and plan: one shuffle partition per core any run
    # can hold (the added VM needs its own); the cap scales with the cores a run starts with.
    over = drill._spec(config, "over", trace, 1.0, routed=False)
    assert local.standalone and over.standalone and local.master == "standalone"
    assert (local.shuffle_partitions, vmbase.shuffle_partitions, over.shuffle_partitions) == (2, 2, 2)
    assert (local.batch_events, vmbase.batch_events, over.batch_events) == (200_000, 200_000, 400_000)
    assert local.onset_s == trace.bursts[0][0]
    assert drill.deployment(over)["vm_cores"] == 2 and drill.deployment(vmbase)["adds"]
    # Sponge's policy in full: a burst that persists is handed to a VM on the worker cores.
    sponge = drill._spec(config, "sponge", trace, 1.0, routed=True)
    assert sponge.persistent and sponge.standalone and not local.persistent and not vmbase.persistent
    assert drill.deployment(sponge)["adds"] == "VMs on the worker cores when a burst persists"


def test_the_pool_cpu_counts_a_joining_executor_from_when_it_joined() -> None:
    burn = (
        "import time\nt = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n"
        "print('burnt', flush=True)\ntime.sleep(60)\n"
    )
    child = subprocess.Popen([sys.executable, "-c", burn], stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        proc = psutil.Process(child.pid)
        deadline = time.monotonic() + 30  # a bounded wait for the sleep that follows the line
        while proc.status() != psutil.STATUS_SLEEPING:
            assert time.monotonic() < deadline, "the burner never went to sleep"
            time.sleep(0.02)
        roots: list[int] = []
        cpu = ProcessTreeCpu(lambda: list(roots), rescan_every=1)
        assert cpu.seconds() == 0.0
        assert sum(proc.cpu_times()[:2]) >= 0.25
        roots.append(child.pid)  # an executor registers: its start-up CPU is not the query's work
        assert cpu.seconds() == 0.0
        assert cpu.seconds() == 0.0  # it only sleeps from now on
    finally:
        child.kill()
        child.wait()


def test_a_run_that_adds_vms_needs_the_standalone_cluster() -> None:
    base = {
        "policy": "sponge",
        "query": "q5",
        "events": 10,
        "seed": 0,
        "schedule": "1:10",
        "output": "out",
        "master": "local[2,4]",
        "vm_cpus": [0],
    }
    with pytest.raises(ConfigError, match="standalone"):
        run_policy.PolicyRun(**base, vms_on_burst=1)
    with pytest.raises(ConfigError, match="standalone"):
        run_policy.PolicyRun(**base, persistent=True, controlled=True, offload=True)
    with pytest.raises(ConfigError, match="offloaded load"):
        run_policy.PolicyRun(**base, persistent=True, standalone=True)
    ok = run_policy.PolicyRun(**base, persistent=True, standalone=True, controlled=True, offload=True)
    assert ok.persistent and not ok.warm_vms


def test_the_hand_over_is_reported_with_what_staying_on_workers_would_have_cost() -> None:
    """4 workers from 20 s; a VM asked for at 60 s and usable at 90 s; the workers released at 95 s. Staying
    on workers keeps those 4 to the end of the 200 s trace; the hand-over pays the VM from 60 s instead."""
    prices = Prices()
    workers = [0.0] * 20 + [4.0] * 75 + [0.0] * 105
    result = {
        "vm_actions": [{"t": 60.0, "add": 1, "release": 0}, {"t": 95.0, "workers_released": 4}],
        "vms": [vm(0, base=True), vm(1, requested=60.0, usable=90.0)],
    }
    h = drill.handover(result, workers, 200.0, prices)
    assert h is not None
    assert (h["requested_s"], h["usable_s"], h["vms_bought"]) == (60.0, 90.0, 1)
    assert (h["workers_released_s"], h["workers_released"]) == (95.0, 4)
    assert h["vm_usd"] == pytest.approx(vm_cost_usd(1 / 4, 140.0, prices=prices), abs=1e-6)
    assert h["lambda_usd"] == pytest.approx(fleet_cost_usd(workers, 1769, prices=prices), abs=1e-6)
    staying = fleet_cost_usd([0.0] * 20 + [4.0] * 180, 1769, prices=prices)
    assert h["staying_on_workers_usd"] == pytest.approx(staying, abs=1e-6)
    assert h["saved_usd"] == pytest.approx(staying - h["vm_usd"] - h["lambda_usd"], abs=1e-6)
    assert h["saved_usd"] > 0  # 105 s of 4 Lambda cores cost more than 140 s of one VM core
    text = handover_clause(h)
    assert text.startswith("the burst persisted: it bought 1 VM at 60.0 s (usable at 90.0 s)")
    assert "released 4 idle workers at 95.0 s" in text and "staying on workers (saved $" in text
    assert drill.handover({"vm_actions": [{"t": 1.0, "workers_released": 0}]}, workers, 200.0, prices) is None

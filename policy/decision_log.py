"""The policy's decisions with their inputs, one JSON line each, and their offline replay.

Why: a scaling decision that cannot be explained afterwards cannot be trusted or tuned. The log holds
the policy's configuration once, then every observation with the decision taken on it, so
`replay(path)` feeds the same observations to a fresh policy and must reproduce every decision.

When the persistent-burst rule runs too (policy/persistent_burst.py), the first line also holds the
rule's settings and every line the VM pool's counts it was given and the request it returned, so
`replay_vms(path)` feeds the logged observations and decisions to a fresh rule and must reproduce
every VM request. The rule is fed the logged decisions, not re-decided ones, so a VM replay checks the
rule alone; `replay` checks the policy.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, Any

from policy.monitor import Observation
from policy.offload_policy import Decision, PolicyConfig, SpongePolicy
from policy.persistent_burst import PersistentBurstRule, VmRequest


class DecisionLog:
    def __init__(self, path: Path, config: PolicyConfig, vm_rule: PersistentBurstRule | None = None) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = open(path, "w")  # noqa: SIM115 (closed by close())
        header: dict[str, Any] = {"config": asdict(config)}
        if vm_rule is not None:
            header["vm_rule"] = vm_rule.settings()
        self._write(header)

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def record(
        self,
        obs: Observation,
        decision: Decision,
        *,
        vms_usable: int | None = None,
        vms_pending: int = 0,
        vm_request: VmRequest | None = None,
    ) -> None:
        """One line; with `vms_usable` given, also the VM rule's inputs (pool counts) and its request."""
        entry: dict[str, Any] = {"observation": asdict(obs), "decision": asdict(decision)}
        if vms_usable is not None:
            entry["vm"] = {"usable": vms_usable, "pending": vms_pending,
                           "request": vm_request.to_json() if vm_request is not None else None}
        self._write(entry)

    def close(self) -> None:
        self._file.close()


@dataclass(frozen=True)
class VmStep:
    """One logged call of the persistent-burst rule: its inputs and the request it returned."""

    obs: Observation
    decision: Decision
    usable: int
    pending: int
    request: VmRequest | None


def _lines(path: Path) -> list[dict[str, Any]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or "config" not in lines[0]:
        raise ValueError(f"{path} is not a decision log (its first line must hold the policy config)")
    return lines


def read(path: Path) -> tuple[PolicyConfig, list[tuple[Observation, Decision]]]:
    lines = _lines(path)
    config = PolicyConfig(**lines[0]["config"])
    return config, [(Observation(**e["observation"]), Decision(**e["decision"])) for e in lines[1:]]


def read_vms(path: Path) -> tuple[PersistentBurstRule, list[VmStep]]:
    """A fresh rule built from the log's settings, and every line that logged the rule's inputs."""
    lines = _lines(path)
    if "vm_rule" not in lines[0]:
        raise ValueError(f"{path} holds no persistent-burst rule settings (the rule was not logged)")
    rule = PersistentBurstRule.from_settings(lines[0]["vm_rule"])
    steps = []
    for e in lines[1:]:
        vm = e.get("vm")
        if vm is None:
            continue
        request = VmRequest.from_json(vm["request"]) if vm["request"] is not None else None
        steps.append(VmStep(Observation(**e["observation"]), Decision(**e["decision"]),
                            vm["usable"], vm["pending"], request))
    return rule, steps


def replay(path: Path) -> list[tuple[Decision, Decision]]:
    """Each logged decision next to the one a fresh policy takes on the same observations."""
    config, entries = read(path)
    policy = SpongePolicy(config)
    return [(logged, policy.decide(obs)) for obs, logged in entries]


def replay_vms(path: Path) -> list[tuple[VmRequest | None, VmRequest | None]]:
    """Each logged VM request (None: no action) next to the one a fresh rule returns on the same inputs."""
    rule, steps = read_vms(path)
    return [(s.request, rule.step(s.obs, s.decision, s.usable, s.pending)) for s in steps]

"""The policy's decisions with their inputs, one JSON line each, and their offline replay.

Why: a scaling decision that cannot be explained afterwards cannot be trusted or tuned. The log holds
the policy's configuration once, then every observation with the decision taken on it, so
`replay(path)` feeds the same observations to a fresh policy and must reproduce every decision.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import IO, Any

from policy.monitor import Observation
from policy.offload_policy import Decision, PolicyConfig, SpongePolicy


class DecisionLog:
    def __init__(self, path: Path, config: PolicyConfig) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = open(path, "w")  # noqa: SIM115 (closed by close())
        self._write({"config": asdict(config)})

    def _write(self, entry: dict[str, Any]) -> None:
        self._file.write(json.dumps(entry) + "\n")
        self._file.flush()

    def record(self, obs: Observation, decision: Decision) -> None:
        self._write({"observation": asdict(obs), "decision": asdict(decision)})

    def close(self) -> None:
        self._file.close()


def read(path: Path) -> tuple[PolicyConfig, list[tuple[Observation, Decision]]]:
    lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    if not lines or "config" not in lines[0]:
        raise ValueError(f"{path} is not a decision log (its first line must hold the policy config)")
    config = PolicyConfig(**lines[0]["config"])
    return config, [(Observation(**e["observation"]), Decision(**e["decision"])) for e in lines[1:]]


def replay(path: Path) -> list[tuple[Decision, Decision]]:
    """Each logged decision next to the one a fresh policy takes on the same observations."""
    config, entries = read(path)
    policy = SpongePolicy(config)
    return [(logged, policy.decide(obs)) for obs, logged in entries]

"""Sponge's figures in the simulator under several settings of the policy's knobs, side by side.

Why: a default such as the monitoring period or the periods a trigger waits for is chosen by what it
does to the reaction, the peak p99 and the cost on the same traces, and ADR 0040's table must be
reproducible by one command:

    python -m policy.sim.sweep --set period_s=1,trigger_periods=1 --set trigger_periods=2 \\
        --pattern sudden:5x:60s --pattern sudden:2x:30s --query q1,q5 --phase 0,0.3,0.7

Each `--set` is one setting (PolicyConfig fields, comma-separated; an empty one is the defaults). A
`--phase` shifts the burst's onset by that fraction of a second past a whole second, since with
observations on whole (or half) seconds a trigger's delay depends on where in a period a burst begins.
Only sponge runs (noscaling too with `--baseline`); every figure is simulated.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import fields
from typing import Any

from core.errors import ConfigError
from policy.offload_policy import PolicyConfig
from policy.sim.experiment import SimConfig, simulate_query

COLUMNS = (
    "setting",
    "pattern",
    "phase",
    "query",
    "reaction_s",
    "peak_p99_ms",
    "cost_usd",
    "worker_s",
    "workers",
)


def parse_setting(text: str) -> dict[str, Any]:
    """`name=value,...` as PolicyConfig fields, each value converted to its field's type."""
    types = {f.name: f.type for f in fields(PolicyConfig)}
    out: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        name, sep, value = part.partition("=")
        if not sep or name not in types:
            raise ConfigError(
                f"bad setting {part!r}", hint=f"name=value with a PolicyConfig field: {sorted(types)}"
            )
        kind = types[name]
        out[name] = int(value) if kind == "int" else value if kind == "str" else float(value)
    return out


def sweep(
    settings: Sequence[dict[str, Any]],
    patterns: Sequence[str],
    queries: Sequence[str],
    phases: Sequence[float] = (0.0,),
    *,
    baseline: bool = False,
    duration_s: float = 180.0,
) -> list[dict[str, Any]]:
    """One row per setting, pattern, phase and query (and policy, with `baseline`)."""
    rows = []
    for setting in settings:
        for pattern in patterns:
            for phase in phases:
                config = SimConfig(
                    pattern=pattern, duration_s=duration_s, lead_s=60.0 + phase, policy=setting
                )
                for query in queries:
                    runs = simulate_query(query, ["sponge", "noscaling"] if baseline else ["sponge"], config)
                    for run in runs.report["runs"]:
                        rows.append(
                            {
                                "setting": ",".join(f"{k}={v}" for k, v in setting.items()) or "defaults",
                                "pattern": pattern,
                                "phase": phase,
                                "query": query if run["policy"] == "sponge" else f"{query} ({run['policy']})",
                                "reaction_s": run["reaction_s"],
                                "peak_p99_ms": run["peak_p99_ms"],
                                "cost_usd": run["cost_usd"],
                                "worker_s": run["lambda_worker_seconds"],
                                "workers": max(run["workers_by_second"]),
                            }
                        )
    return rows


def markdown(rows: Sequence[dict[str, Any]]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", default=None, help="name=value,... (repeatable)")
    parser.add_argument("--pattern", action="append", default=None)
    parser.add_argument("--query", default="q1,q5")
    parser.add_argument("--phase", default="0")
    parser.add_argument("--duration", type=float, default=180.0)
    parser.add_argument("--baseline", action="store_true", help="also run noscaling")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    settings = [parse_setting(s) for s in (args.set or [""])]
    rows = sweep(
        settings,
        args.pattern or ["sudden:5x:60s"],
        args.query.split(","),
        [float(p) for p in args.phase.split(",")],
        baseline=args.baseline,
        duration_s=args.duration,
    )
    print(json.dumps(rows, indent=1) if args.json else markdown(rows))


if __name__ == "__main__":
    main()

"""The policy's decisions with their inputs, one JSON line each, and their offline replay.

Why: a scaling decision that cannot be explained afterwards cannot be trusted or tuned. The log holds
the policy's configuration once, then every observation with the decision taken on it, so
`replay(path)` feeds the same observations to a fresh policy and must reproduce every decision.

A log outlives the policy that wrote it. A header written before a knob existed lacks it, and the
policy then ran as that knob's value before it existed (`LEGACY`: one period triggers, 1 s periods,
Eq. 3 workers), not as its default today; a decision written before a field existed is compared on
the fields it holds. So a log replays exactly whichever build wrote it.

When the persistent-burst rule runs too (policy/persistent_burst.py), the first line also holds the
rule's settings and every line the VM pool's counts it was given and the request it returned, so
`replay_vms(path)` feeds the logged observations and decisions to a fresh rule and must reproduce
every VM request. The rule is fed the logged decisions, not re-decided ones, so a VM replay checks the
rule alone; `replay` checks the policy.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import IO, Any, TypeVar

from core.errors import InputError, SpongeError
from policy.monitor import Observation
from policy.offload_policy import Decision, PolicyConfig, SpongePolicy
from policy.persistent_burst import PersistentBurstRule, VmRequest

T = TypeVar("T")

# What the policy did before each of these knobs existed: a header without one replays with this value.
LEGACY: dict[str, Any] = {
    "period_s": 1.0,
    "trigger_periods": 1,
    "release_periods": 1,
    "scale_down_hold_s": 5.0,
    "worker_sizing": "eq3",
}


def config_of(header: dict[str, Any]) -> PolicyConfig:
    """The policy config a header holds, with the pre-existing behaviour for knobs it does not name."""
    return PolicyConfig(**{**{k: v for k, v in LEGACY.items() if k not in header}, **header})


class DecisionLog:
    def __init__(
        self,
        path: Path,
        config: PolicyConfig,
        vm_rule: PersistentBurstRule | None = None,
        *,
        append: bool = False,
        started: str | None = None,
    ) -> None:
        """A new log at `path`; with `append`, a new segment after the lines already there (a resumed
        live run keeps its earlier decisions). Each segment opens with its own header line, holding
        `started` (when the segment's run began) when given; `replay` starts a fresh policy there."""
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._file: IO[str] = open(path, "a" if append else "w")  # noqa: SIM115 (closed by close())
        header: dict[str, Any] = {"config": asdict(config)}
        if started is not None:
            header["started"] = started
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
            entry["vm"] = {
                "usable": vms_usable,
                "pending": vms_pending,
                "request": vm_request.to_json() if vm_request is not None else None,
            }
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


_REWRITE_HINT = "the drill that wrote it was cut short, or the file was edited: run the drill again"


def _lines(path: Path) -> list[tuple[int, dict[str, Any]]]:
    """(line number, entry) of every line of the log at `path`; its first entry holds the policy config.

    Why an InputError naming the file and the line for every flaw: the log is read back long after the
    run that wrote it (to replay or explain its decisions), so a torn or edited line must say where it
    is and what to do, not surface as a JSON decoder's or a dataclass's traceback.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError(
            f"no decision log at {path}",
            hint="a drill writes one per policy, as <report>/<policy>/output-decisions.jsonl",
        ) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read the decision log {path}: {e}", hint=_REWRITE_HINT) from None
    entries: list[tuple[int, dict[str, Any]]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError as e:
            raise InputError(f"{path} line {number} is not JSON ({e})", hint=_REWRITE_HINT) from None
        if not isinstance(entry, dict):
            raise InputError(
                f"{path} line {number} is a JSON {type(entry).__name__}, not an object", hint=_REWRITE_HINT
            )
        entries.append((number, entry))
    if not entries or not isinstance(entries[0][1].get("config"), dict):
        raise InputError(
            f"{path} is not a decision log (its first line must hold the policy config)", hint=_REWRITE_HINT
        )
    return entries


def _build(path: Path, number: int, make: Callable[[], T]) -> T:
    """`make()`, its failure on a malformed entry told as an InputError naming the file and line."""
    try:
        return make()
    except KeyError as e:
        raise InputError(f"{path} line {number} lacks {e}", hint=_REWRITE_HINT) from None
    except (TypeError, ValueError, SpongeError) as e:
        detail = e.one_line() if isinstance(e, SpongeError) else str(e)
        raise InputError(
            f"{path} line {number} is not a decision log entry ({detail})", hint=_REWRITE_HINT
        ) from None


def _step(e: dict[str, Any]) -> tuple[Observation, Decision]:
    return Observation(**e["observation"]), Decision(**e["decision"])


_DECISION_FIELDS = tuple(f.name for f in fields(Decision))


def _as_logged(logged: Decision, again: Decision, recorded: frozenset[str]) -> Decision:
    """`again` with the fields the log did not record (it predates them) taken from `logged`."""
    missing = {name: getattr(logged, name) for name in _DECISION_FIELDS if name not in recorded}
    return replace(again, **missing) if missing else again


def _is_header(entry: dict[str, Any]) -> bool:
    """A segment's first line: the policy config, no observation (a resumed run appends a new segment)."""
    return "config" in entry and "observation" not in entry


def _segments(path: Path) -> list[tuple[PolicyConfig, list[tuple[Observation, Decision, frozenset[str]]]]]:
    """Each run segment: its config and its lines, each with the decision fields it recorded."""
    result: list[tuple[PolicyConfig, list[tuple[Observation, Decision, frozenset[str]]]]] = []
    for n, e in _lines(path):
        if _is_header(e):
            result.append((_build(path, n, lambda e=e: config_of(e["config"])), []))
        else:
            obs, decision = _build(path, n, lambda e=e: _step(e))
            result[-1][1].append((obs, decision, frozenset(e["decision"])))
    return result


def segments(path: Path) -> list[tuple[PolicyConfig, list[tuple[Observation, Decision]]]]:
    """Each run segment of the log: its policy config and its (observation, decision) lines."""
    return [(config, [(o, d) for o, d, _ in steps]) for config, steps in _segments(path)]


def read(path: Path) -> tuple[PolicyConfig, list[tuple[Observation, Decision]]]:
    """The logged policy config and every (observation, decision) after it; InputError on any flaw.
    A log of several segments gives its first config and the steps of them all (`segments` splits them)."""
    parts = segments(path)
    return parts[0][0], [step for _, steps in parts for step in steps]


def _vm_step(e: dict[str, Any]) -> VmStep | None:
    vm = e.get("vm")
    if vm is None:
        return None
    request = VmRequest.from_json(vm["request"]) if vm["request"] is not None else None
    return VmStep(*_step(e), vm["usable"], vm["pending"], request)


def read_vms(path: Path) -> tuple[PersistentBurstRule, list[VmStep]]:
    """A fresh rule built from the log's settings, and every line that logged the rule's inputs."""
    (first_number, first), *rest = _lines(path)
    if "vm_rule" not in first:
        raise InputError(
            f"{path} holds no persistent-burst rule settings (the rule was not logged)",
            hint="read the log of a policy that ran the VM rule (vmbase, vminit)",
        )
    rule = _build(path, first_number, lambda: PersistentBurstRule.from_settings(first["vm_rule"]))
    steps = [_build(path, n, lambda e=e: _vm_step(e)) for n, e in rest if not _is_header(e)]
    return rule, [s for s in steps if s is not None]


def replay(path: Path) -> list[tuple[Decision, Decision]]:
    """Each logged decision next to the one a fresh policy takes on the same observations."""
    pairs: list[tuple[Decision, Decision]] = []
    for config, entries in _segments(path):
        policy = SpongePolicy(config)  # each run segment started a fresh policy
        pairs += [(logged, _as_logged(logged, policy.decide(obs), kept)) for obs, logged, kept in entries]
    return pairs


def replay_vms(path: Path) -> list[tuple[VmRequest | None, VmRequest | None]]:
    """Each logged VM request (None: no action) next to the one a fresh rule returns on the same inputs."""
    rule, steps = read_vms(path)
    return [(s.request, rule.step(s.obs, s.decision, s.usable, s.pending)) for s in steps]

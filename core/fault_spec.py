"""`--inject` fault specs: parsed once at the edge, then handed to whoever makes the fault happen.

Why one parser for all kinds: the CLI, the VM agent (`python -m router.agent --inject ...`) and the
tests must agree on the spelling, the defaults and the error for a typo. Each kind is made to happen
by the component that owns the victim:

| kind            | who injects it     | what happens                                                    |
|-----------------|--------------------|-----------------------------------------------------------------|
| kill-worker     | VM agent           | one worker process is killed mid-work: every `every` seconds, or |
|                 |                    | once, when the `after-chunks`-th chunk has been dispatched       |
| throttle        | VM agent (invoker) | a `share` of invokes fails with Lambda's throttling error        |
| slow-worker     | VM agent -> worker | a `share` of chunks stalls `delay` on its worker (past timeouts) |
| agent-restart   | runner             | the agent process is killed and started again: at `at` seconds, |
|                 |                    | or once epoch `after-epoch` has committed                       |
| agent-kill      | runner             | the agent process is SIGKILLed and left dead (its launcher must |
|                 |                    | notice and start it again): at `at`, or after `after-epoch`     |
| task-failure    | Spark source tasks | a `share` of source tasks fails its first attempt               |
| query-restart   | runner             | the streaming query stops and resumes from its checkpoint: at   |
|                 |                    | `at` seconds, or once epoch `after-epoch` has committed         |

Why two kinds of trigger: a wall-clock trigger (`at`, `every`) is what a drill wants (a fault in the
middle of a burst); an event trigger (`after-epoch`, `after-chunks`) fires at the same point of the
run however fast the machine is, so a failing test replays from its seed. Share-based faults draw
from a seeded generator either way.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from core.errors import ConfigError

KILL_WORKER = "kill-worker"
THROTTLE = "throttle"
SLOW_WORKER = "slow-worker"
AGENT_RESTART = "agent-restart"
AGENT_KILL = "agent-kill"
TASK_FAILURE = "task-failure"
QUERY_RESTART = "query-restart"
DRIVER_KILL = "driver-kill"

# kind -> {parameter: default (None = required)}; "share" is a fraction, COUNTS are whole numbers,
# the others durations. A kind in TRIGGERS takes exactly one of its trigger parameters instead.
KINDS: dict[str, dict[str, str | None]] = {
    KILL_WORKER: {},
    THROTTLE: {"share": None},
    SLOW_WORKER: {"share": None, "delay": "30s"},
    AGENT_RESTART: {},
    AGENT_KILL: {},
    TASK_FAILURE: {"share": None},
    QUERY_RESTART: {},
    DRIVER_KILL: {},
}
TRIGGERS: dict[str, tuple[str, ...]] = {
    KILL_WORKER: ("every", "after-chunks"),
    AGENT_RESTART: ("at", "after-epoch"),
    AGENT_KILL: ("at", "after-epoch"),
    QUERY_RESTART: ("at", "after-epoch"),
    DRIVER_KILL: ("at", "after-epoch"),
}
COUNTS = ("after-chunks", "after-epoch")
AGENT_KINDS = (KILL_WORKER, THROTTLE, SLOW_WORKER)
EXAMPLES = (
    "kill-worker:every=2s",
    "kill-worker:after-chunks=10",
    "throttle:share=0.2",
    "slow-worker:share=0.1,delay=30s",
    "agent-restart:at=10s",
    "agent-restart:after-epoch=3",
    "agent-kill:after-epoch=2",
    "task-failure:share=0.05",
    "query-restart:at=15s",
    "query-restart:after-epoch=5",
    "driver-kill:after-epoch=3",
)
_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*(ms|s|m)?\s*$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, None: 1.0}


def parse_duration(text: str, what: str = "duration") -> float:
    """Seconds from '2s', '500ms', '1.5m' or a bare number of seconds."""
    m = _DURATION.match(text)
    if not m:
        raise ConfigError(f"{what} {text!r} is not a duration", hint="write e.g. 2s, 500ms or 1m")
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@dataclass(frozen=True)
class FaultSpec:
    """One `KIND:key=value[,key=value]`, validated: `params` holds seconds and fractions as floats."""

    kind: str
    params: tuple[tuple[str, float], ...]

    def __getitem__(self, name: str) -> float:
        return dict(self.params)[name]

    def get(self, name: str) -> float | None:
        return dict(self.params).get(name)

    @classmethod
    def parse(cls, text: str) -> FaultSpec:
        kind, _, rest = text.strip().partition(":")
        kind = kind.strip().lower()
        if kind not in KINDS:
            raise ConfigError(
                f"unknown fault kind {kind!r} in --inject {text!r}",
                hint=f"use one of {', '.join(KINDS)}, e.g. {EXAMPLES[0]}",
            )
        accepted = (*KINDS[kind], *TRIGGERS.get(kind, ()))
        given: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in rest.split(","))):
            key, eq, value = part.partition("=")
            key = key.strip().lower()
            if not eq or key not in accepted:
                raise ConfigError(
                    f"--inject {text!r}: {part!r} is not a parameter of {kind}",
                    hint=f"{kind} takes {', '.join(f'{k}=...' for k in accepted)}",
                )
            given[key] = value.strip()
        examples = " or ".join(e for e in EXAMPLES if e.startswith(kind + ":"))
        triggers = [t for t in TRIGGERS.get(kind, ()) if t in given]
        if kind in TRIGGERS and len(triggers) != 1:
            what = "lacks" if not triggers else "takes only one of"
            raise ConfigError(
                f"--inject {text!r} {what} {' or '.join(f'{t}=' for t in TRIGGERS[kind])}",
                hint=f"write e.g. {examples}",
            )
        params: list[tuple[str, float]] = []
        for key in (*KINDS[kind], *triggers):
            value = given.get(key, KINDS[kind].get(key))
            if value is None:
                raise ConfigError(f"--inject {text!r} lacks {key}=", hint=f"write e.g. {examples}")
            params.append((key, _parse_value(key, value, text)))
        spec = cls(kind, tuple(params))
        if kind == KILL_WORKER and spec.get("every") is not None and spec["every"] <= 0:
            raise ConfigError(f"--inject {text!r}: every must be positive")
        return spec

    def text(self) -> str:
        """The canonical spelling, which parses back to an equal spec (passed on to the agent)."""
        body = ",".join(f"{k}={_format_value(k, v)}" for k, v in self.params)
        return f"{self.kind}:{body}"


def _parse_value(key: str, value: str, text: str) -> float:
    if key == "share":
        return _share(value, text)
    if key in COUNTS:
        if not value.isdigit():
            raise ConfigError(
                f"--inject {text!r}: {key} {value!r} is not a whole number", hint=f"write e.g. {key}=3"
            )
        return float(int(value))
    return parse_duration(value, key)


def _format_value(key: str, value: float) -> str:
    if key in COUNTS:
        return str(int(value))
    return f"{value:g}" if key == "share" else f"{value:g}s"


def _share(value: str, text: str) -> float:
    try:
        share = float(value)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise ConfigError(f"--inject {text!r}: share {value!r} is not in [0, 1]", hint="write e.g. share=0.2")
    return share


def parse_all(texts: Iterable[str]) -> tuple[FaultSpec, ...]:
    return tuple(FaultSpec.parse(t) for t in texts)


def of_kind(specs: Iterable[FaultSpec], kind: str) -> list[FaultSpec]:
    return [s for s in specs if s.kind == kind]


@dataclass
class Triggers:
    """When the runner's faults of one kind fire: `at` seconds after the start, and once epoch
    `after_epochs` has committed; each fires once (`due` consumes it)."""

    at: list[float]
    after_epochs: list[int]

    @classmethod
    def of(cls, specs: Iterable[FaultSpec], kind: str) -> Triggers:
        chosen = of_kind(specs, kind)
        return cls(
            sorted(s["at"] for s in chosen if s.get("at") is not None),
            sorted(int(s["after-epoch"]) for s in chosen if s.get("after-epoch") is not None),
        )

    def due(self, elapsed_s: float, committed_epoch: int) -> bool:
        """Whether one of them fires now; it is then spent."""
        if self.at and elapsed_s >= self.at[0]:
            self.at.pop(0)
            return True
        if self.after_epochs and committed_epoch >= self.after_epochs[0]:
            self.after_epochs.pop(0)
            return True
        return False

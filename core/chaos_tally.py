"""What a series of random fault schedules found: lost, duplicated and unexpected records, and the
seeds of the schedules that failed.

Why one home: the protocol bench (`python -m bench.chaos`) and `sponge chaos` on Spark judge their
schedules by the same checker (core/results.py `check_records`) and report the same figures, so that
each failing schedule is named by the one command that replays it.
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from core.results import RecordCheck


@dataclass(frozen=True)
class ScheduleOutcome:
    """One schedule: its seed, its faults (as text), what the checker counted, and an error if the
    schedule could not finish (its missing records are counted lost as well)."""

    seed: int
    faults: tuple[str, ...]
    lost: int = 0
    duplicated: int = 0
    unexpected: int = 0
    seconds: float = 0.0
    error: str = ""

    @classmethod
    def checked(
        cls, seed: int, faults: tuple[str, ...], check: RecordCheck, seconds: float, error: str = ""
    ) -> ScheduleOutcome:
        return cls(
            seed, faults, len(check.lost), len(check.duplicated), len(check.unexpected), seconds, error
        )

    @property
    def ok(self) -> bool:
        return not (self.lost or self.duplicated or self.unexpected or self.error)

    @property
    def kinds(self) -> list[str]:
        return sorted({f.split(":", 1)[0].split("@", 1)[0] for f in self.faults})


@dataclass
class Tally:
    """The outcomes so far; `replay` turns a seed into the command that runs that schedule alone."""

    replay: str
    outcomes: list[ScheduleOutcome] = field(default_factory=list)

    def add(self, outcome: ScheduleOutcome) -> None:
        self.outcomes.append(outcome)

    @property
    def failed(self) -> list[ScheduleOutcome]:
        return [o for o in self.outcomes if not o.ok]

    def replay_command(self, seed: int) -> str:
        return self.replay.format(seed=seed)

    def report(self) -> dict[str, Any]:
        """The figures every chaos command prints: at least schedules, failed, lost, duplicated and
        unexpected, with the fault mix (schedules per fault kind) and the failing seeds."""
        mix: Counter[str] = Counter(k for o in self.outcomes for k in o.kinds)
        seconds = [o.seconds for o in self.outcomes]
        return {
            "schedules": len(self.outcomes),
            "failed": len(self.failed),
            "lost": sum(o.lost for o in self.outcomes),
            "duplicated": sum(o.duplicated for o in self.outcomes),
            "unexpected": sum(o.unexpected for o in self.outcomes),
            "fault_mix": dict(sorted(mix.items())),
            "schedule_s_median": round(statistics.median(seconds), 3) if seconds else 0.0,
            "schedule_s_max": round(max(seconds), 3) if seconds else 0.0,
            "failing": [
                {
                    "seed": o.seed,
                    "faults": list(o.faults),
                    "lost": o.lost,
                    "duplicated": o.duplicated,
                    "unexpected": o.unexpected,
                    "error": o.error,
                    "replay": self.replay_command(o.seed),
                }
                for o in self.failed
            ],
        }

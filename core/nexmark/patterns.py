"""Burst patterns of a drill (Sponge Fig. 9): sudden, sine and gradual, as event-rate schedules.

Why text specs: a drill is repeated and compared across policies and machines, so its trace must be
named exactly on the command line and in the report. `sudden:2x:30s` holds the stable rate, jumps
to 2x for 30 s and comes back; `sine:2x:20s` swings between the stable rate and 2x with a 20 s
period; `gradual:2x:30s` ramps up to 2x over the first half of 30 s and back down over the second.
`persistent:2x:150s` is a sudden burst held long enough that buying a VM beats renting Lambdas for it
(ADR 0007): the drill in which Sponge hands the burst over to a VM.
Every pattern starts with a stable lead-in (so the policy learns the stable rate and the VMs warm up)
and ends with a stable tail (so recovery can be seen).
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

from core.errors import ConfigError
from core.nexmark.schedule import RateSchedule, Segment

KINDS = ("sudden", "sine", "gradual")  # the shapes of Sponge's Fig. 9, the drill matrix's columns
PERSISTENT = "persistent"  # a sudden burst that outlasts renting: the hand-over to a bought VM
_SPEC = re.compile(r"^(?P<kind>[a-z]+):(?P<factor>\d+(\.\d+)?)x:(?P<length>\d+(\.\d+)?)s$")
_HINT = "write KIND:FACTORx:SECONDSs, e.g. sudden:2x:30s, sine:2x:20s, gradual:3x:40s or persistent:2x:150s"
SINE_STEP_S = 1.0  # the sine is drawn as linear pieces of this length
RAMP_FROM = 0.1  # a lead-in ramp starts at this share of the stable rate


@dataclass(frozen=True)
class Trace:
    """A drill's input: the schedule events follow and the windows counted as bursts."""

    pattern: str
    stable_rate: float
    duration_s: float
    schedule: RateSchedule
    bursts: tuple[tuple[float, float], ...]

    @property
    def events(self) -> int:
        return int(self.schedule.events_by(self.duration_s))

    def rate_by_second(self) -> list[float]:
        return [
            float(self.schedule.events_by(s + 1) - self.schedule.events_by(s))
            for s in range(int(self.duration_s))
        ]


@dataclass(frozen=True)
class BurstPattern:
    kind: str
    factor: float
    length_s: float

    @classmethod
    def parse(cls, text: str) -> BurstPattern:
        m = _SPEC.match(text.strip().lower())
        if not m or m["kind"] not in (*KINDS, PERSISTENT):
            raise ConfigError(f"unknown burst pattern {text!r}", hint=_HINT)
        factor, length = float(m["factor"]), float(m["length"])
        if factor <= 1 or length <= 0:
            raise ConfigError(
                f"burst pattern {text!r} needs a factor above 1x and a positive length", hint=_HINT
            )
        return cls(m["kind"], factor, length)

    def text(self) -> str:
        return f"{self.kind}:{self.factor:g}x:{self.length_s:g}s"

    def trace(self, stable_rate: float, duration_s: float, lead_s: float, ramp_s: float = 0.0) -> Trace:
        """The schedule over `duration_s`: `lead_s` stable, the burst part, then stable to the end.

        With `ramp_s`, the lead-in's first seconds (at most half of it) ramp up from RAMP_FROM of the
        stable rate, so a query that starts with the trace does not start behind it.
        """
        burst_s = self.length_s if self.kind != "sine" else duration_s - lead_s - self.length_s / 2
        if lead_s < 0 or lead_s + burst_s > duration_s:
            raise ConfigError(
                f"a {self.text()} burst after {lead_s:g} s of lead-in does not fit in {duration_s:g} s",
                hint="raise --duration or shorten the burst",
            )
        r, peak = stable_rate, stable_rate * self.factor
        ramp = min(ramp_s, lead_s / 2)
        pieces: list[Segment] = [Segment(ramp, r * RAMP_FROM, r)] if ramp > 0 else []
        pieces += [Segment(lead_s - ramp, r, r)] if lead_s > 0 else []
        bursts: list[tuple[float, float]] = []
        if self.kind in ("sudden", PERSISTENT):
            pieces.append(Segment(self.length_s, peak, peak))
            bursts.append((lead_s, lead_s + self.length_s))
        elif self.kind == "gradual":
            half = self.length_s / 2
            pieces += [Segment(half, r, peak), Segment(half, peak, r)]
            bursts.append((lead_s, lead_s + self.length_s))
        else:
            steps = max(1, int(burst_s / SINE_STEP_S))
            level = [
                r + (peak - r) * (1 - math.cos(2 * math.pi * i * SINE_STEP_S / self.length_s)) / 2
                for i in range(steps + 1)
            ]
            pieces += [Segment(SINE_STEP_S, a, b) for a, b in itertools.pairwise(level)]
            t = lead_s + self.length_s / 4  # each period's upper half counts as a burst
            while t < lead_s + burst_s:
                bursts.append((t, min(t + self.length_s / 2, lead_s + burst_s)))
                t += self.length_s
        used = sum(p.duration_s for p in pieces)
        pieces.append(Segment(max(duration_s - used, 0.0), r, r))
        return Trace(self.text(), stable_rate, duration_s, RateSchedule(tuple(pieces)), tuple(bursts))

"""Seeded fault schedules: which faults a run suffers and at which point, drawn from one integer.

Why: a hand-picked list of schedules tests what its author thought of; a generator tests mixtures
nobody picked, and a failing one replays from its seed (`sponge run --inject` takes the printed
specs). Every trigger is an event (an epoch committed, a chunk dispatched), never the wall clock, and
every share is drawn from the agent's and the source's own seeded generators, so the same seed gives
the same faults at the same points of the same run.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from core.fault_spec import (
    AGENT_KILL,
    AGENT_RESTART,
    DRIVER_KILL,
    KILL_WORKER,
    KINDS,
    QUERY_RESTART,
    SLOW_WORKER,
    TASK_FAILURE,
    THROTTLE,
    FaultSpec,
)

# Shares of at least 0.2: the agent's seeded draws then hit the very first invoke and chunk, so a
# drawn throttle or stall always happens, however few invokes a short run makes.
_SHARES = (0.2, 0.3, 0.5)
# A stalled worker holds its chunk past the chunk timeout of the runs that draw schedules (1-2 s), and
# is free again soon after: its environment cannot tell that the chunk was taken back meanwhile.
STALL = "3s"


def random_schedule(
    seed: int, *, epochs: int, chunks: int, kinds: Sequence[str] = tuple(KINDS), most: int = 3
) -> tuple[FaultSpec, ...]:
    """One to `most` faults of `kinds`, each triggered by an event within the run's first `epochs`
    epochs or `chunks` dispatched chunks (the caller's estimate of how long the run is)."""
    if epochs < 3 or chunks < 1:
        raise ValueError("a schedule needs a run of at least 3 epochs and 1 chunk")
    rng = random.Random(seed)
    chosen = rng.sample(sorted(kinds), rng.randint(1, min(most, len(kinds))))
    texts = []
    for kind in sorted(chosen):
        if kind == KILL_WORKER:
            texts.append(f"{kind}:after-chunks={rng.randint(1, chunks)}")
        elif kind in (AGENT_RESTART, AGENT_KILL, QUERY_RESTART, DRIVER_KILL):
            texts.append(f"{kind}:after-epoch={rng.randint(1, epochs - 2)}")
        elif kind == SLOW_WORKER:
            texts.append(f"{kind}:share={rng.choice(_SHARES)},delay={STALL}")
        elif kind in (THROTTLE, TASK_FAILURE):
            texts.append(f"{kind}:share={rng.choice(_SHARES)}")
        else:
            raise ValueError(f"no schedule for fault kind {kind!r}")
    return tuple(FaultSpec.parse(t) for t in texts)

"""A resumed live run appends a segment to its decision log; replay starts a fresh policy at each."""

from __future__ import annotations

import json
from pathlib import Path

from policy.decision_log import DecisionLog, read, replay, segments
from policy.monitor import Observation
from policy.offload_policy import PolicyConfig, SpongePolicy

CONFIG = PolicyConfig(per_core_rate=1000.0, rho=2.0)


def run_segment(path: Path, append: bool, started: str) -> list:
    policy, log = SpongePolicy(CONFIG), DecisionLog(path, CONFIG, append=append, started=started)
    decisions = []
    for t, rate, backlog in ((0, 500.0, 0), (0.5, 5000.0, 8000), (1, 5000.0, 9000)):
        obs = Observation(
            t=t,
            cpu=0.9,
            input_rate=rate,
            processed_rate=1000.0,
            backlog=backlog,
            epoch_s=1.0,
            vm_cores=1,
            cost_ms=0.1,
        )
        decisions.append(policy.decide(obs))
        log.record(obs, decisions[-1])
    log.close()
    return decisions


def test_an_appended_segment_keeps_the_first_and_replays_from_a_fresh_policy(tmp_path: Path) -> None:
    path = tmp_path / "decisions.jsonl"
    first = run_segment(path, append=False, started="2026-01-01T00:00:00+00:00")
    second = run_segment(path, append=True, started="2026-01-01T01:00:00+00:00")
    headers = [json.loads(line) for line in path.read_text().splitlines() if '"observation"' not in line]
    assert [h["started"] for h in headers] == ["2026-01-01T00:00:00+00:00", "2026-01-01T01:00:00+00:00"]
    assert [len(steps) for _, steps in segments(path)] == [3, 3]
    assert [d for _, d in read(path)[1]] == first + second
    assert first[1].share == 0 and first[2].share > 0  # confirmed on its second period, then offloaded,
    # so a policy carried over from the first segment would decide otherwise
    assert all(logged == again for logged, again in replay(path))

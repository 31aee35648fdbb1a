"""The VM agent: one long-lived process per VM host between Spark's tasks and the Lambda fleet.

Why a separate process: Spark tasks come and go (and are retried), while workers' connections,
the fleet, the in-flight chunks and the result cache must outlive any one task. The agent

* serves `Offload` to Spark tasks: a chunk of records plus the program to run, answered with the
  partial state; idempotent per (epoch, partition, chunk_seq, program_id) through the result cache;
* serves `Work` to workers, which dial out to it (paper challenge C2); a worker must present the
  token derived from the session secret for its own worker id (constant-time check), else it is
  refused and counted;
* owns the fleet through an `Invoker` (router/invokers/base.py) and the chunk life cycle through the
  `Dispatcher` (router/dispatcher.py): upstream backup, re-dispatch, local fallback.

    python -m router.agent --port 0 --secret-file /path/secret --invoker embedded --max-workers 4 \
        [--inject kill-worker:every=2s] [--inject throttle:share=0.2] \
        [--inject slow-worker:share=0.1,delay=30s]

prints one JSON line {"event": "listening", "port": ..., "address": ..., "session_id": ...} and
serves until SIGTERM or SIGINT, then prints {"event": "stopped", ...counters}. `--inject` makes the
agent cause the named faults itself (router/faults.py), for drills of the recovery paths.
`AgentServer` is the same thing in-process (tests, the drills).

Where each part lives: config.py (`AgentConfig`, validated once), server.py (`AgentServer`, its life
cycle, the chunk path and its gRPC face), programs.py (the programs the agent knows and runs itself),
worker_link.py (a worker's stream as the dispatcher sees it), cli.py and __main__.py (the process).
The ready line is defined here, beside this description of the process, so that the launcher
(router/agent_process.py) can read it without importing the server.
"""

from __future__ import annotations

import json

READY_EVENT = "listening"


def ready_line(port: int, address: str, session_id: str) -> str:
    """The JSON line the agent prints on stdout once it serves: the launcher's signal to go on."""
    return json.dumps({"event": READY_EVENT, "port": port, "address": address, "session_id": session_id})


def ready_port(line: str | bytes) -> int | None:
    """The port a ready line reports, or None for any other line (a launcher skips those)."""
    try:
        event = json.loads(line)
    except ValueError:
        return None
    if not isinstance(event, dict) or event.get("event") != READY_EVENT:
        return None
    port = event.get("port")
    valid = isinstance(port, int) and not isinstance(port, bool) and 0 < port <= 65535
    return port if valid else None

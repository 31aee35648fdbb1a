"""The embedded fleet's execution environment: one OS process that runs the real Lambda handler.

Why a process per environment: it gives the embedded backend Lambda's behaviours a caller must
survive, for real: a cold start (interpreter start, handler import, program compile) versus warm
reuse of an idle process with everything still imported, a process that can be killed at its timeout
or crash mid-chunk, and nothing shared with the agent but the network. router/invokers/embedded.py
starts it, hands it invocations and enforces the timeout.

Protocol (one JSON object per line): the runtime writes {"type": "ready", "import_s": ...} once, then
for each line {"request_id", "payload", "deadline_ms"} read on stdin writes
{"type": "result", "request_id", "ok": true, "payload": ...} or
{"type": "result", "request_id", "ok": false, "error": {"errorType", "errorMessage"}}.
Responses go to the process's original stdout; everything printed to stdout afterwards (Powertools
logs, EMF metrics) is redirected to stderr, as Lambda sends it to CloudWatch rather than the caller.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any

from core import parent_death


class LocalLambdaContext:
    """The attributes of Lambda's context object that the handler and Powertools read."""

    def __init__(self, function_name: str, memory_mb: int, request_id: str, deadline_ms: int) -> None:
        self.function_name = function_name
        self.function_version = "$LATEST"
        self.invoked_function_arn = f"arn:aws:lambda:local:000000000000:function:{function_name}"
        self.memory_limit_in_mb = memory_mb
        self.aws_request_id = request_id
        self.log_group_name = f"/aws/lambda/{function_name}"
        self.log_stream_name = f"local/{os.getpid()}"
        self._deadline_ms = deadline_ms

    def get_remaining_time_in_millis(self) -> int:
        return max(0, self._deadline_ms - int(time.time() * 1000))


def die_with_parent(parent_pid: int) -> None:
    """Make sure this process does not outlive `parent_pid` (the agent that owns the fleet).

    Why: an agent that is SIGKILLed cannot kill its workers, and a worker busy in a chunk (or stalled)
    would not notice its stream is gone: it would hold a CPU and its memory until its deadline. On Linux
    the kernel SIGKILLs us when the parent (thread) dies (core/parent_death.py); elsewhere a watcher
    thread polls for it. Checked once right away too: the parent may have died before we got here.
    """
    if parent_pid <= 0:
        return
    if not parent_death.arm(parent_pid):  # exits at once if the parent is already gone
        import threading

        def watch() -> None:
            while os.getppid() == parent_pid:
                time.sleep(0.25)
            os._exit(1)

        threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="Sponge embedded Lambda execution environment")
    p.add_argument("--function-name", default="sponge-worker")
    p.add_argument("--memory-mb", type=int, default=1769)
    p.add_argument("--parent-pid", type=int, default=0, help="exit when this process (the fleet's) dies")
    p.add_argument("--fault-delay-s", type=float, default=0.0, help="tests: sleep this long in every chunk")
    p.add_argument("--fault-crash-in-chunk", type=int, default=0, help="tests: exit while processing chunk N")
    p.add_argument("--fault-stall-s", type=float, default=0.0, help="tests: hang before dialing the agent")
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    die_with_parent(args.parent_pid)
    replies = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)  # stdout now goes to stderr: logs and metrics never corrupt the reply channel
    started = time.monotonic()
    from lambda_worker import handler as lambda_handler

    if args.fault_delay_s or args.fault_crash_in_chunk or args.fault_stall_s:
        from lambda_worker.session import ChunkFaults

        faults = ChunkFaults(args.fault_delay_s, args.fault_crash_in_chunk, args.fault_stall_s)
        lambda_handler.configure_faults(faults)
    replies.write(
        json.dumps({"type": "ready", "import_s": time.monotonic() - started, "pid": os.getpid()}) + "\n"
    )
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        context = LocalLambdaContext(
            args.function_name, args.memory_mb, request["request_id"], int(request["deadline_ms"])
        )
        reply: dict[str, Any] = {"type": "result", "request_id": request["request_id"]}
        try:
            reply["payload"] = lambda_handler.handler(request["payload"], context)
            reply["ok"] = True
        except Exception as e:  # what Lambda reports as an Unhandled function error
            reply["ok"] = False
            reply["error"] = {"errorType": type(e).__name__, "errorMessage": str(e)}
        replies.write(json.dumps(reply, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

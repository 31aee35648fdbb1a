"""A Lambda runtime-interface emulator: one host process = one LocalStack execution environment.

Started by executor.py with the function's interpreter (SPONGE_FUNCTION_PYTHON) as a plain script, so
it may import only the standard library: the function's interpreter has the function's dependencies,
not LocalStack's. It speaks the protocol LocalStack's executor endpoint expects of its Go init
(DESIGN.md section 6):

1. import the handler (`_HANDLER`, "module.function", from the code directory), like Lambda's init
   phase; on failure POST {errorMessage, errorType} to `{LOCALSTACK_RUNTIME_ENDPOINT}/status/{id}/error`
   and exit;
2. listen on 127.0.0.1:SPONGE_RUNTIME_PORT, then POST `{endpoint}/status/{id}/ready`;
3. for each POST /invoke {"invoke-id", "invoked-function-arn", "payload", "trace-id"}: answer 202 at
   once, run the handler with a Lambda context and the function timeout (AWS_LAMBDA_FUNCTION_TIMEOUT),
   POST the captured log lines to `{endpoint}/invocations/{invoke-id}/logs` as {"logs": text}, then
   the result to `.../response`, or {errorMessage, errorType, stackTrace} to `.../error`.

Every POST carries Content-Type application/json: with urllib's default form type LocalStack's
request parser reads an empty body. Logs: the process's stdout and stderr are a pipe read by a thread
that copies every line to the environment's log file (the executor's `get_logs`) and, during an
invocation, into that invocation's logs, framed by START/END/REPORT lines as on AWS; so Powertools'
JSON logs and EMF metric documents reach CloudWatch Logs the way they do on AWS. A handler that
outlives its timeout gets Lambda's "Task timed out" error, and the process exits: the executor starts
a fresh one for the next invocation, as Lambda resets a sandbox after a timeout.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import queue
import sys
import threading
import time
import traceback
import urllib.request
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

POST_TIMEOUT_S = 30.0
DRAIN_TIMEOUT_S = 2.0
_MARK = "\x00sponge-runtime-mark\x00"


@dataclass(frozen=True)
class RuntimeEnv:
    """What the executor hands the runtime through its environment, read once at start."""

    endpoint: str
    runtime_id: str
    handler: str
    port: int
    task_root: str
    timeout_s: float
    function_name: str
    function_version: str
    memory_mb: int
    log_group: str
    log_stream: str

    @classmethod
    def from_environ(cls, env: Mapping[str, str]) -> RuntimeEnv:
        missing = [
            k
            for k in (
                "LOCALSTACK_RUNTIME_ENDPOINT",
                "LOCALSTACK_RUNTIME_ID",
                "_HANDLER",
                "SPONGE_RUNTIME_PORT",
            )
            if not env.get(k)
        ]
        if missing:
            raise SystemExit(
                f"sponge runtime: missing environment variables {missing}; LocalStack starts this"
            )
        return cls(
            endpoint=env["LOCALSTACK_RUNTIME_ENDPOINT"].rstrip("/"),
            runtime_id=env["LOCALSTACK_RUNTIME_ID"],
            handler=env["_HANDLER"],
            port=int(env["SPONGE_RUNTIME_PORT"]),
            task_root=env.get("LAMBDA_TASK_ROOT") or os.getcwd(),
            timeout_s=float(env.get("AWS_LAMBDA_FUNCTION_TIMEOUT") or 3),
            function_name=env.get("AWS_LAMBDA_FUNCTION_NAME", "function"),
            function_version=env.get("AWS_LAMBDA_FUNCTION_VERSION", "$LATEST"),
            memory_mb=int(env.get("AWS_LAMBDA_FUNCTION_MEMORY_SIZE") or 128),
            log_group=env.get("AWS_LAMBDA_LOG_GROUP_NAME", ""),
            log_stream=env.get("AWS_LAMBDA_LOG_STREAM_NAME", ""),
        )


class LambdaContext:
    """The attributes of Lambda's context object that handlers and Powertools read."""

    def __init__(self, env: RuntimeEnv, request_id: str, invoked_arn: str, deadline: float) -> None:
        self.function_name = env.function_name
        self.function_version = env.function_version
        self.invoked_function_arn = invoked_arn
        self.memory_limit_in_mb = env.memory_mb
        self.aws_request_id = request_id
        self.log_group_name = env.log_group
        self.log_stream_name = env.log_stream
        self.identity = None
        self.client_context = None
        self._deadline = deadline

    def get_remaining_time_in_millis(self) -> int:
        return max(0, int((self._deadline - time.time()) * 1000))


def post(url: str, body: bytes) -> None:
    """POST with a JSON content type (see the module doc for why it matters)."""
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=POST_TIMEOUT_S) as resp:
        resp.read()


def error_body(e: BaseException, error_type: str | None = None) -> dict[str, Any]:
    return {
        "errorMessage": str(e) or type(e).__name__,
        "errorType": error_type or type(e).__name__,
        "stackTrace": traceback.format_tb(e.__traceback__.tb_next if e.__traceback__ else None),
    }


class LogCapture:
    """Owns fds 1 and 2: copies every line to the log file and, while one is open, to an invocation."""

    def __init__(self) -> None:
        self._out = os.fdopen(os.dup(1), "w", buffering=1, errors="replace")  # the executor's log file
        read_fd, write_fd = os.pipe()
        os.dup2(write_fd, 1)
        os.dup2(write_fd, 2)
        os.close(write_fd)
        self._read = os.fdopen(read_fd, "r", errors="replace")
        self._lock = threading.Lock()
        self._lines: list[str] | None = None
        self._marked = threading.Event()
        threading.Thread(target=self._pump, name="log-pump", daemon=True).start()

    def _pump(self) -> None:
        for line in self._read:
            if line.rstrip("\n") == _MARK:
                self._marked.set()
                continue
            self._out.write(line)
            with self._lock:
                if self._lines is not None:
                    self._lines.append(line if line.endswith("\n") else line + "\n")

    def begin(self) -> None:
        with self._lock:
            self._lines = []

    def write(self, text: str) -> None:
        """A runtime line (START/END/REPORT), through the same pipe so it keeps its place in order."""
        os.write(1, text.encode())

    def end(self) -> str:
        """The invocation's lines, once everything written before this call has come through the pipe."""
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(OSError, ValueError):
                stream.flush()
        self._marked.clear()
        os.write(1, f"{_MARK}\n".encode())
        self._marked.wait(DRAIN_TIMEOUT_S)
        with self._lock:
            lines, self._lines = self._lines or [], None
        return "".join(lines)


def load_handler(spec: str, task_root: str) -> Callable[[Any, Any], Any]:
    module_name, _, func = spec.rpartition(".")
    if not module_name:
        raise ValueError(f"bad handler {spec!r}: expected module.function")
    if task_root not in sys.path:
        sys.path.insert(0, task_root)
    module = importlib.import_module(module_name.replace("/", "."))
    handler = getattr(module, func, None)
    if not callable(handler):
        raise AttributeError(f"handler {func!r} missing on module {module_name!r}")
    return handler


class Runtime:
    def __init__(self, env: RuntimeEnv, handler: Callable[[Any, Any], Any], logs: LogCapture) -> None:
        self.env = env
        self.handler = handler
        self.logs = logs
        self.invocations: queue.Queue[dict[str, Any]] = queue.Queue()
        self.init_s = 0.0
        self._first = True

    def url(self, path: str) -> str:
        return f"{self.env.endpoint}{path}"

    def serve(self) -> None:
        runtime = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                if self.path.rstrip("/") != "/invoke":
                    self.send_response(404)
                    self.end_headers()
                    return
                try:
                    invocation = json.loads(body or b"{}")
                except ValueError:
                    self.send_response(400)
                    self.end_headers()
                    return
                runtime.invocations.put(invocation)
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # quiet: no access log in the logs
                pass

        server = HTTPServer(("127.0.0.1", self.env.port), Handler)
        threading.Thread(target=server.serve_forever, name="invoke-server", daemon=True).start()

    def loop(self) -> None:
        while True:
            self.run(self.invocations.get())

    def run(self, invocation: Mapping[str, Any]) -> None:
        request_id = str(invocation.get("invoke-id", ""))
        started = time.time()
        deadline = started + self.env.timeout_s
        self.logs.begin()
        self.logs.write(f"START RequestId: {request_id} Version: {self.env.function_version}\n")
        try:
            event = json.loads(invocation.get("payload") or "null")
        except ValueError as e:
            event, outcome = None, ("error", error_body(e, "Runtime.InvalidPayload"))
        else:
            outcome = self._call(event, request_id, str(invocation.get("invoked-function-arn", "")), deadline)
        ms = (time.time() - started) * 1000
        timed_out = outcome[0] == "timeout"
        if timed_out:
            when = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime())
            message = f"{when} {request_id} Task timed out after {self.env.timeout_s:.2f} seconds"
            self.logs.write(message + "\n")
            outcome = ("error", {"errorMessage": message, "errorType": "Sandbox.Timedout"})
        self.logs.write(f"END RequestId: {request_id}\n")
        init = f"\tInit Duration: {self.init_s * 1000:.2f} ms" if self._first else ""
        self._first = False
        self.logs.write(
            f"REPORT RequestId: {request_id}\tDuration: {ms:.2f} ms\tBilled Duration: {int(ms) + 1} ms\t"
            f"Memory Size: {self.env.memory_mb} MB\tMax Memory Used: {_max_rss_mb()} MB{init}\n"
        )
        text = self.logs.end()
        base = f"/invocations/{request_id}"
        post(self.url(base + "/logs"), json.dumps({"logs": text}).encode())
        kind, body = outcome
        post(self.url(base + ("/response" if kind == "ok" else "/error")), _dumps(body))
        if timed_out:
            os._exit(1)  # the handler thread may still run: Lambda resets the sandbox, so do we

    def _call(self, event: Any, request_id: str, arn: str, deadline: float) -> tuple[str, Any]:
        context = LambdaContext(self.env, request_id, arn, deadline)
        box: list[tuple[str, Any]] = []

        def target() -> None:
            try:
                box.append(("ok", self.handler(event, context)))
            except BaseException as e:  # a function error, reported like Lambda's Unhandled error
                traceback.print_exception(e)
                box.append(("error", error_body(e)))

        thread = threading.Thread(target=target, name=f"invoke-{request_id[:8]}", daemon=True)
        thread.start()
        thread.join(max(0.0, deadline - time.time()))
        return box[0] if box else ("timeout", None)


def _dumps(body: Any) -> bytes:
    try:
        return json.dumps(body).encode()
    except (TypeError, ValueError) as e:
        return json.dumps(error_body(e, "Runtime.MarshalError")).encode()


def _max_rss_mb() -> int:
    """This process's peak RSS (VmHWM): ru_maxrss would report LocalStack's, inherited across exec."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return 0


def die_with_parent() -> None:
    """Exit when LocalStack (our parent) is gone: a SIGKILLed LocalStack cannot stop its runtimes."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(1)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def main() -> int:
    env = RuntimeEnv.from_environ(os.environ)
    die_with_parent()
    logs = LogCapture()
    t0 = time.monotonic()
    try:
        handler = load_handler(env.handler, env.task_root)
    except Exception as e:
        traceback.print_exception(e)
        logs.end()
        post(
            f"{env.endpoint}/status/{env.runtime_id}/error",
            _dumps(error_body(e, "Runtime.ImportModuleError")),
        )
        return 1
    runtime = Runtime(env, handler, logs)
    runtime.init_s = time.monotonic() - t0
    runtime.serve()
    post(f"{env.endpoint}/status/{env.runtime_id}/ready", b"{}")
    runtime.loop()
    return 0


if __name__ == "__main__":
    sys.exit(main())

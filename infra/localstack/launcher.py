"""Start and stop LocalStack in host mode (no Docker) from its own virtualenv, in the background.

    python -m infra.localstack.launcher start [--port 4566] [--state-dir .localstack]
    python -m infra.localstack.launcher stop | status

Why host mode: there is no Docker engine on the machines this project is built on, so LocalStack runs
as a plain process (`python -m localstack.runtime.main`, what `localstack start --host` runs) from
.localstack-venv (infra/localstack/setup.sh), and its Lambda functions run as host processes through
the project's runtime executor (LAMBDA_RUNTIME_EXECUTOR=sponge-host, infra/localstack/sponge_executor).

Everything of one instance lives in its state directory: LocalStack's filesystem root, its log, the
Lambda runtimes' logs and `localstack.json` (pid, port, endpoint), which `stop` and `status` read, so
`make localstack-stop` finds what `make localstack` started, and a test fixture's instance (its own
state directory and a free port) never touches the developer's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from core.errors import ConfigError, MissingDependencyError, SpongeError

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEFAULT_PORT = 4566
SERVICES = ("lambda", "cloudformation", "s3", "iam", "logs", "sts", "cloudwatch", "kinesis")
"""LocalStack loads a service on its first request, so each costs nothing at start-up; Kinesis's engine
(the kinesis-local npm package, kinesis-mock) is installed by infra/localstack/setup.sh, so that first
request does not wait on npm either."""
READY = ("available", "running")
STATE_FILE = "localstack.json"
LOG_FILE = "localstack.log"
EXECUTOR = "sponge-host"
LOCALSTACK_MAIN = "localstack.runtime.main"
DROPPED_ENV = ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV", "PYTHONSTARTUP")


class LocalStackError(SpongeError):
    """LocalStack could not be started, reached or stopped."""


def _default_function_python() -> Path:
    venv_python = PROJECT_ROOT / ".venv" / "bin" / "python"
    return venv_python if venv_python.exists() else Path(sys.executable)


@dataclass(frozen=True)
class LocalStackConfig:
    """One LocalStack instance: where its venv and state live, where it listens, what runs functions.

    `function_python` runs the Lambda functions (SPONGE_FUNCTION_PYTHON): the project's interpreter,
    which has the worker's dependencies (pyarrow, polars, grpcio, Powertools) installed.
    """

    venv: Path = PROJECT_ROOT / ".localstack-venv"
    state_dir: Path = PROJECT_ROOT / ".localstack"
    host: str = "127.0.0.1"
    port: int = DEFAULT_PORT
    services: tuple[str, ...] = SERVICES
    function_python: Path = field(default_factory=_default_function_python)
    start_timeout_s: float = 120.0
    region: str = "us-east-1"
    extra_env: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        if not 0 < self.port < 65536:
            raise ConfigError(f"LocalStack port must be in 1..65535, got {self.port}")
        if self.start_timeout_s <= 0:
            raise ConfigError(f"start timeout must be positive, got {self.start_timeout_s}")

    @classmethod
    def from_env(cls, env: dict[str, str] | None = None, **overrides: object) -> LocalStackConfig:
        """Defaults, then LOCALSTACK_PORT / LOCALSTACK_STATE_DIR / LOCALSTACK_VENV, then `overrides`."""
        env = dict(os.environ if env is None else env)
        values: dict[str, object] = {}
        if env.get("LOCALSTACK_PORT"):
            try:
                values["port"] = int(env["LOCALSTACK_PORT"])
            except ValueError:
                raise ConfigError(
                    f"LOCALSTACK_PORT={env['LOCALSTACK_PORT']!r} is not a port number"
                ) from None
        if env.get("LOCALSTACK_STATE_DIR"):
            values["state_dir"] = Path(env["LOCALSTACK_STATE_DIR"]).resolve()
        if env.get("LOCALSTACK_VENV"):
            values["venv"] = Path(env["LOCALSTACK_VENV"]).resolve()
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)  # type: ignore[arg-type]

    @property
    def python(self) -> Path:
        return self.venv / "bin" / "python"

    @property
    def endpoint(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def state_file(self) -> Path:
        return self.state_dir / STATE_FILE

    @property
    def log_file(self) -> Path:
        return self.state_dir / LOG_FILE

    def environment(self) -> dict[str, str]:
        """LocalStack's process environment (see the module doc and docs/localstack.md)."""
        env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
        env.update(
            {
                "GATEWAY_LISTEN": f"{self.host}:{self.port}",
                "LOCALSTACK_HOST": f"{self.host}:{self.port}",
                "FILESYSTEM_ROOT": str(self.state_dir / "filesystem"),
                "SERVICES": ",".join(self.services),
                "DNS_ADDRESS": "0",  # no DNS server: it would want port 53, and nothing here needs it
                "SKIP_SSL_CERT_DOWNLOAD": "1",  # no network: generate the gateway's certificate locally
                "DISABLE_EVENTS": "1",  # no analytics calls
                "LAMBDA_RUNTIME_EXECUTOR": EXECUTOR,
                "SPONGE_FUNCTION_PYTHON": str(self.function_python),
                "SPONGE_EXECUTOR_LOG_DIR": str(self.state_dir / "lambda"),
                "DEFAULT_REGION": self.region,
                # Kinesis: no emulated latency on stream operations, and no state carried over from
                # an earlier instance (kinesis-mock would otherwise reload a file shared by all of them)
                "KINESIS_LATENCY": "0",
                "KINESIS_PERSISTENCE": "0",
            }
        )
        env.update(dict(self.extra_env))
        return env


@dataclass(frozen=True)
class LocalStackHandle:
    """A running instance, as written to (and read back from) its state file."""

    pid: int
    endpoint: str
    port: int
    state_dir: Path
    log_file: Path
    region: str = "us-east-1"

    def to_json(self) -> dict[str, object]:
        return {
            "pid": self.pid,
            "endpoint": self.endpoint,
            "port": self.port,
            "state_dir": str(self.state_dir),
            "log_file": str(self.log_file),
            "region": self.region,
        }

    @classmethod
    def from_json(cls, data: dict[str, object]) -> LocalStackHandle:
        return cls(
            pid=int(data["pid"]),  # type: ignore[arg-type]
            endpoint=str(data["endpoint"]),
            port=int(data["port"]),  # type: ignore[arg-type]
            state_dir=Path(str(data["state_dir"])),
            log_file=Path(str(data["log_file"])),
            region=str(data.get("region", "us-east-1")),
        )


def _is_localstack(pid: int) -> bool:
    """True when `pid` is alive and is a LocalStack runtime (a recycled pid must not be signalled)."""
    try:
        cmdline = psutil.Process(pid).cmdline()
    except (psutil.NoSuchProcess, psutil.ZombieProcess):  # gone, or exited and waiting to be reaped
        return False
    except psutil.AccessDenied:  # its arguments cannot be read here: trust the pid file
        return psutil.pid_exists(pid)
    return LOCALSTACK_MAIN in " ".join(cmdline)


def running(config: LocalStackConfig) -> LocalStackHandle | None:
    """The instance of `config.state_dir`, if its state file names a live LocalStack process."""
    try:
        handle = LocalStackHandle.from_json(json.loads(config.state_file.read_text()))
    except (OSError, ValueError, KeyError):
        return None
    return handle if _is_localstack(handle.pid) else None


def health(endpoint: str, timeout_s: float = 2.0) -> dict[str, str] | None:
    """The service states reported by /_localstack/health, or None when nothing answers."""
    try:
        with urllib.request.urlopen(f"{endpoint}/_localstack/health", timeout=timeout_s) as resp:
            return dict(json.loads(resp.read()).get("services", {}))
    except (OSError, ValueError, urllib.error.URLError):
        return None


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"


def _port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def start(config: LocalStackConfig) -> LocalStackHandle:
    """Start LocalStack in the background and return once every service of `config` is ready.

    Idempotent: an instance already running from the same state directory and healthy is returned.
    """
    if not config.python.exists():
        raise MissingDependencyError(
            f"LocalStack's virtualenv {config.venv} is missing", hint="run make localstack-setup"
        )
    existing = running(config)
    if existing is not None:
        if existing.port == config.port and _ready(health(existing.endpoint), config.services):
            return existing
        raise LocalStackError(
            f"a LocalStack from {config.state_dir} is already running "
            f"(pid {existing.pid}, {existing.endpoint})",
            hint="run make localstack-stop first",
        )
    if not _port_free(config.host, config.port):
        raise LocalStackError(
            f"port {config.port} on {config.host} is busy",
            hint="stop what listens there (make localstack-stop if it is LocalStack), "
            "or pick another port with LOCALSTACK_PORT=...",
        )
    config.state_dir.mkdir(parents=True, exist_ok=True)
    with open(config.log_file, "ab") as log:
        log.write(f"\n---- starting LocalStack on {config.endpoint} at {time.ctime()} ----\n".encode())
        log.flush()
        proc = subprocess.Popen(
            [str(config.python), "-m", LOCALSTACK_MAIN],
            cwd=config.state_dir,
            env=config.environment(),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    handle = LocalStackHandle(
        proc.pid, config.endpoint, config.port, config.state_dir, config.log_file, config.region
    )
    config.state_file.write_text(json.dumps(handle.to_json(), indent=2))
    try:
        _wait_ready(config, proc)
    except BaseException:
        _terminate(proc.pid, grace_s=5.0)
        config.state_file.unlink(missing_ok=True)
        raise
    return handle


def _ready(services: dict[str, str] | None, wanted: Sequence[str]) -> bool:
    return services is not None and all(services.get(s) in READY for s in wanted)


def _wait_ready(config: LocalStackConfig, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + config.start_timeout_s
    services: dict[str, str] | None = None
    while time.monotonic() < deadline:
        code = proc.poll()
        if code is not None:
            raise LocalStackError(
                f"LocalStack exited with status {code} while starting; last lines of {config.log_file}:\n"
                + _tail(config.log_file),
                hint="fix the cause above, or rerun make localstack-setup",
            )
        services = health(config.endpoint)
        if _ready(services, config.services):
            return
        time.sleep(0.25)
    missing = [s for s in config.services if (services or {}).get(s) not in READY]
    raise LocalStackError(
        f"LocalStack was not ready within {config.start_timeout_s:.0f} s (not ready: {', '.join(missing)}); "
        f"last lines of {config.log_file}:\n" + _tail(config.log_file),
        hint="a slow machine may need a longer timeout (--timeout)",
    )


def _terminate(pid: int, grace_s: float) -> None:
    """SIGTERM the process group (LocalStack shuts its Lambda runtimes down), SIGKILL after `grace_s`."""
    try:
        os.killpg(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        try:
            done, _ = os.waitpid(pid, os.WNOHANG)
        except ChildProcessError:  # not our child: poll for its end
            done = 0 if _is_localstack(pid) else pid
        if done:
            return
        time.sleep(0.1)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def stop(config: LocalStackConfig, grace_s: float = 20.0) -> bool:
    """Stop the instance of `config.state_dir`; False when none was running."""
    handle = running(config)
    if handle is None:
        config.state_file.unlink(missing_ok=True)
        return False
    _terminate(handle.pid, grace_s)
    config.state_file.unlink(missing_ok=True)
    return True


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m infra.localstack.launcher", description=__doc__.split("\n")[0]
    )
    p.add_argument("command", choices=("start", "stop", "status"))
    p.add_argument(
        "--port", type=int, default=None, help=f"gateway port (default $LOCALSTACK_PORT or {DEFAULT_PORT})"
    )
    p.add_argument("--state-dir", type=Path, default=None, help="state directory (default .localstack)")
    p.add_argument("--timeout", type=float, default=None, help="seconds to wait for health (default 120)")
    args = p.parse_args(argv)
    try:
        config = LocalStackConfig.from_env(
            port=args.port,
            state_dir=args.state_dir.resolve() if args.state_dir else None,
            start_timeout_s=args.timeout,
        )
        if args.command == "start":
            t0 = time.monotonic()
            handle = start(config)
            print(
                f"LocalStack is ready on {handle.endpoint} "
                f"(pid {handle.pid}, {time.monotonic() - t0:.1f} s); "
                f"log: {handle.log_file}; stop it with make localstack-stop"
            )
        elif args.command == "stop":
            print(
                "LocalStack stopped" if stop(config) else f"no LocalStack was running from {config.state_dir}"
            )
        else:
            handle = running(config)
            if handle is None:
                print(f"no LocalStack is running from {config.state_dir} (start it with make localstack)")
                return 1
            print(json.dumps({**handle.to_json(), "services": health(handle.endpoint)}, indent=2))
    except SpongeError as e:
        print(f"error: {e.one_line()}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

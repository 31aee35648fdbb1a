"""`sponge.toml`: the settings a deployment keeps between runs, under the flags that override them.

Why a file: where the VM agent listens, the address its workers dial and the transport belong to
the machine and its network, not to one run; typing them into every `sponge run` and `sponge drill`
invites a run that listens on the wrong interface. The file is read once, at the edge, into the same
typed values the flags give (`DataPlane`); a flag given on the command line wins.

    [data_plane]
    bind = "0.0.0.0"          # where the agent listens
    advertise = "10.0.3.7"    # the host its workers and callers dial
    transport = "mtls"        # tls, mtls or plaintext
    tls_dir = "/etc/sponge/tls"  # your own certificates instead of a CA made per run:
                              # ca.pem, server.pem, server.key (and ca.key for mtls)

    [policy]                  # `sponge run --policy sponge`: what this machine's VMs and workers carry
    per_core_rate = 40000     # events/s one VM core carries (the policy's start; it learns it)
    rho = 5.0                 # a Lambda worker core's capacity in VM cores
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

from core.errors import ConfigError

DEFAULT_FILE = Path("sponge.toml")
TABLES = {"data_plane", "policy"}


@dataclass(frozen=True)
class DataPlane:
    """The agent's addresses and transport; None leaves the default (core/spark/offload_session.py)."""

    bind: str | None = None
    advertise: str | None = None
    transport: str | None = None
    tls_dir: str | None = None  # the file only: a directory of certificates belongs to the machine

    def options(self) -> dict[str, str | None]:
        """As OffloadConfig's keyword arguments (and DrillConfig's)."""
        return asdict(self)

    def under(self, flags: DataPlane) -> DataPlane:
        """These settings with every flag that was given on top."""
        given = {f.name: getattr(flags, f.name) for f in fields(flags) if getattr(flags, f.name) is not None}
        return replace(self, **given)


def data_plane(
    path: Path | None, bind: str | None, advertise: str | None, transport: str | None
) -> DataPlane:
    """The data plane's settings: the flags given, over the settings file `path` (see `load`)."""
    return load(path).under(DataPlane(bind, advertise, transport))


@dataclass(frozen=True)
class PolicySettings:
    """The live policy's profile of this machine; None leaves the flag's default (core/cli/run.py)."""

    per_core_rate: float | None = None
    rho: float | None = None


def policy_settings(path: Path | None) -> PolicySettings:
    """The [policy] table of `path` (None: ./sponge.toml when there is one)."""
    resolved, data = _read(path)
    table = data.get("policy", {})
    known = {f.name for f in fields(PolicySettings)}
    wrong = sorted(
        k for k, v in table.items() if k not in known or isinstance(v, bool) or not isinstance(v, int | float)
    )
    if wrong:
        raise ConfigError(
            f"{resolved}: [policy] {', '.join(wrong)} is not a setting with a number value",
            hint=f"the settings are {', '.join(sorted(known))}, each a number",
        )
    bad = sorted(k for k, v in table.items() if v <= 0)
    if bad:
        raise ConfigError(f"{resolved}: [policy] {', '.join(bad)} must be positive", hint="e.g. rho = 5.0")
    return PolicySettings(**{k: float(v) for k, v in table.items()})


def _read(path: Path | None) -> tuple[Path | None, dict]:
    """`path` (None: ./sponge.toml when there is one) and its tables, checked for unknown ones."""
    if path is None:
        if not DEFAULT_FILE.is_file():
            return None, {}
        path = DEFAULT_FILE
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ConfigError(f"no configuration file {path}", hint="check --config, or drop it") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path} is not TOML: {e}", hint="see `sponge run --help` for its layout") from None
    unknown = set(data) - TABLES
    if unknown:
        raise ConfigError(f"{path} has unknown tables {sorted(unknown)}", hint=f"use {sorted(TABLES)}")
    return path, data


def load(path: Path | None) -> DataPlane:
    """The [data_plane] settings of `path` (None: ./sponge.toml when there is one, else none at all)."""
    path, data = _read(path)
    table = data.get("data_plane", {})
    known = {f.name for f in fields(DataPlane)}
    wrong = sorted(k for k, v in table.items() if k not in known or not isinstance(v, str))
    if wrong:
        raise ConfigError(
            f"{path}: [data_plane] {', '.join(wrong)} is not a setting with a text value",
            hint=f"the settings are {', '.join(sorted(known))}, each a quoted string",
        )
    return DataPlane(**table)

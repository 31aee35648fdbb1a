"""The `sponge` command line: one app, its command groups registered by themselves.

Each group is a module with `register(app)`, named in pyproject.toml under the entry-point group
`sponge.commands` (the streaming commands here in core/cli/, the deployment commands in infra/cli.py).
So this module imports no command, and no package below the CLI imports the CLI.

Errors a user can act on are printed as one line with what to do, never as a traceback; pass
--debug before the command to see the traceback of an unexpected failure.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Annotated

import typer

from core.console import err
from core.errors import ConfigError, SpongeError

COMMAND_GROUPS = "sponge.commands"
_debug = {"on": False}


def build_app() -> typer.Typer:
    """The app with every registered command group added, in the order pyproject.toml lists them."""
    app = typer.Typer(
        help="Sponge on Spark: keep Spark streaming jobs fast through bursts by offloading to Lambda "
        "workers.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        add_completion=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    groups = entry_points(group=COMMAND_GROUPS)
    if not groups:
        raise ConfigError(
            f"no command groups are registered under {COMMAND_GROUPS!r}",
            hint="install the project (make setup) so that its entry points are known",
        )
    for group in groups:
        group.load()(app)
    return app


def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of unexpected failures.")] = False,
):
    _debug["on"] = debug


app = build_app()


def main(argv: Sequence[str] | None = None) -> None:
    """Run `sponge` on `argv` (default: the process's arguments); tests pass theirs to run it in-process."""
    try:
        rc = app(args=None if argv is None else list(argv), standalone_mode=False, prog_name="sponge")
        sys.exit(rc if isinstance(rc, int) else 0)
    except SpongeError as e:
        err.print(f"error: {e.one_line()}", markup=False)
        sys.exit(2)
    except typer.Abort:
        err.print("aborted")
        sys.exit(130)
    except typer.TyperException as e:
        ctx = getattr(e, "ctx", None)
        cmd = ctx.command_path if ctx is not None else "sponge"
        err.print(f"error: {e.format_message()} (see `{cmd} --help`)", markup=False)
        sys.exit(2)
    except Exception as e:
        if _debug["on"]:
            raise
        err.print(
            f"error: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''} "
            "(rerun with `sponge --debug ...` for the traceback)",
            markup=False,
        )
        sys.exit(1)

"""The terminal: results on stdout, progress and errors on stderr, for every command-line tool."""

from __future__ import annotations

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)

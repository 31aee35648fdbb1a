"""The terminal: results on stdout, progress and errors on stderr, for every command-line tool."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)


@contextmanager
def progress(first: str, every_s: float = 0.0, console: Console = err) -> Iterator[Callable[[str], None]]:
    """A long command's progress: one changing line in a terminal, or timestamped lines in a log.

    Why: a spinner draws nothing on a pipe or a file, so a drill redirected to a log showed no line for
    its fifteen minutes and looked hung. In a log every update is a line, or, with `every_s`, at most
    one a that many seconds (a run's per-epoch updates would otherwise fill it).
    """
    if console.is_terminal:
        with console.status(first) as status:
            yield status.update
        return
    last = -float("inf")

    def line(text: str) -> None:
        nonlocal last
        now = time.monotonic()
        if now - last >= every_s:
            last = now
            console.print(f"{time.strftime('%H:%M:%S')} {text}", markup=False)

    line(first)
    yield line

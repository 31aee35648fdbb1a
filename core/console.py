"""The terminal: results on stdout, progress and errors on stderr, for every command-line tool."""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False, soft_wrap=True)
_NUMBER = re.compile(r"\d[\d,.]*")


@contextmanager
def progress(first: str, every_s: float = 10.0, console: Console = err) -> Iterator[Callable[[str], None]]:
    """A long command's progress: one changing line in a terminal, or timestamped lines in a log.

    Why: a spinner draws nothing on a pipe or a file, so a drill redirected to a log showed no line for
    its fifteen minutes and looked hung. In a log an update that says something new is a line at once;
    one that only changes its numbers (a probe's seconds, a run's epochs) is one at most every `every_s`.
    """
    if console.is_terminal:
        with console.status(first) as status:
            yield status.update
        return
    # The first line waits for the first update: a command that fails before any (a bad endpoint, no
    # Java) leaves its one-line error alone on stderr.
    pending: str | None = f"{time.strftime('%H:%M:%S')} {first}"
    last_t, last_said = -float("inf"), _NUMBER.sub("#", first)

    def line(text: str) -> None:
        nonlocal pending, last_t, last_said
        now, said = time.monotonic(), _NUMBER.sub("#", text)
        if said != last_said or now - last_t >= every_s:
            last_t, last_said = now, said
            if pending is not None:
                console.print(pending, markup=False)
                pending = None
            console.print(f"{time.strftime('%H:%M:%S')} {text}", markup=False)

    yield line

"""Progress on stderr: a spinner in a terminal, lines in a log (a spinner draws nothing there)."""

from __future__ import annotations

import io
import re

import pytest
from rich.console import Console

import core.console as console_module
from core.console import progress


def _log() -> tuple[Console, io.StringIO]:
    text = io.StringIO()
    return Console(file=text, force_terminal=False, highlight=False, width=200), text


def test_in_a_log_each_update_that_says_something_new_is_a_timestamped_line() -> None:
    console, text = _log()
    with progress("drill ...", console=console) as shown:
        shown("probing [8:20000]")
        shown("sponge: 10 events")
    lines = text.getvalue().splitlines()
    assert [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in lines] == [
        "drill ...",
        "probing [8:20000]",  # brackets are text, not rich markup
        "sponge: 10 events",
    ]
    assert all(re.match(r"\d\d:\d\d:\d\d ", line) for line in lines)


def test_updates_that_change_only_numbers_are_a_line_at_most_every_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = iter([0.0, 3.0, 9.9, 11.0, 12.0, 21.0])
    monkeypatch.setattr(console_module.time, "monotonic", lambda: next(clock))
    console, text = _log()
    with progress("run ...", every_s=10, console=console) as shown:
        shown("epoch 1, 1,000 records")  # 0.0 s: says something new
        shown("epoch 2, 2,000 records")  # 3.0 s: only its numbers changed
        shown("epoch 3, 3,000 records")  # 9.9 s: still within the interval
        shown("stopping once epoch 3 commits")  # 11.0 s: new again
        shown("stopping once epoch 4 commits")
        shown("stopping once epoch 5 commits")  # 21.0 s: the interval passed
    shown_lines = [line.split(" ", 1)[1] for line in text.getvalue().splitlines()]
    assert shown_lines == [
        "run ...",
        "epoch 1, 1,000 records",
        "stopping once epoch 3 commits",
        "stopping once epoch 5 commits",
    ]


def test_a_command_that_fails_before_its_first_update_leaves_stderr_to_its_error() -> None:
    console, text = _log()
    with pytest.raises(RuntimeError), progress("putting 100 events into s ...", console=console):
        raise RuntimeError("no endpoint")
    assert text.getvalue() == ""


def test_in_a_terminal_it_is_one_status_line_that_changes() -> None:
    text = io.StringIO()
    console = Console(file=text, force_terminal=True, width=200)
    with progress("drill ...", console=console) as shown:
        shown("probing")
    assert not re.search(r"^\d\d:\d\d:\d\d ", text.getvalue(), re.MULTILINE)  # it redraws, logs no line

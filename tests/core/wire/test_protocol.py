"""Protocol plumbing: generated code present and current, worker tokens, lazy-import errors."""

from __future__ import annotations

import builtins
import subprocess
import sys

import pytest

from core.errors import MissingDependencyError
from core.wire import build_proto
from core.wire.protocol import pb, secret_matches, token_matches, worker_token

pytestmark = pytest.mark.timeout(60)


def test_generated_code_is_current() -> None:
    assert build_proto.is_current(), "run make setup (python -m core.wire.build_proto)"
    proc = subprocess.run(
        [sys.executable, "-m", "core.wire.build_proto", "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_generated_code_is_ignored_by_git() -> None:
    assert (build_proto.OUT / ".gitignore").read_text().strip() == "*"


def test_worker_tokens_are_bound_to_session_and_worker() -> None:
    key = b"s" * 32
    t = worker_token(key, "sess", "w1")
    assert token_matches(key, "sess", "w1", t)
    assert not token_matches(key, "sess", "w2", t)
    assert not token_matches(key, "other", "w1", t)
    assert not token_matches(b"x" * 32, "sess", "w1", t)
    assert secret_matches(key, key.decode()) and not secret_matches(key, "nope")


def test_missing_generated_code_says_how_to_fix_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_import = builtins.__import__

    def no_generated(name, *args, **kwargs):  # type: ignore[no-untyped-def]
        if name.startswith("core.wire._generated"):
            raise ImportError("No module named 'core.wire._generated'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_generated)
    with pytest.raises(MissingDependencyError) as info:
        pb()
    assert "make setup" in info.value.one_line()

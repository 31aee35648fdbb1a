"""`sponge run --policy ...` hands run_query a live policy built from the flags over sponge.toml, without
Spark: run_query is replaced by a recorder (the arguments are what this tests)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from core.cli.main import main
from core.spark.live_policy import FileBacklog, GeneratedBacklog, LivePolicy


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []

    def record(config: Any, progress: Any = None, hooks: Any = None, stop: Any = None) -> dict:
        seen.append({"config": config, "progress": progress, "hooks": hooks})
        return {}

    monkeypatch.setattr("core.spark.runner.run_query", record)
    monkeypatch.setattr("core.deployment.STACK_DIR", tmp_path / "no-stacks")
    monkeypatch.chdir(tmp_path)
    return seen


def sponge(*args: str) -> None:
    with pytest.raises(SystemExit) as e:
        main(list(args))
    assert e.value.code in (0, None)


def test_policy_sponge_offloads_from_share_zero_and_reads_sponge_toml(calls: list, tmp_path: Path) -> None:
    (tmp_path / "sponge.toml").write_text("[policy]\nper_core_rate = 12345\nrho = 3.5\n")
    sponge("run", "q1", "-o", str(tmp_path / "out"), "--rate", "1000", "--policy", "sponge", "--workers", "3")
    (call,) = calls
    hooks = call["hooks"]
    assert isinstance(hooks, LivePolicy) and hooks.name == "sponge"
    assert call["config"].offload.share == 0.0 and call["config"].offload.workers == 3
    assert (hooks.config.per_core_rate, hooks.config.rho, hooks.config.max_workers) == (12345.0, 3.5, 3)
    assert isinstance(hooks.backlog, GeneratedBacklog) and not hooks.append
    assert not (tmp_path / "out").exists()  # nothing written before run_query claims the output


def test_flags_win_over_sponge_toml_and_resume_appends(calls: list, tmp_path: Path) -> None:
    (tmp_path / "sponge.toml").write_text("[policy]\nper_core_rate = 12345\n")
    sponge(
        "run",
        "q1",
        "-o",
        str(tmp_path / "out"),
        "--rate",
        "1000",
        "--policy",
        "sponge",
        "--per-core-rate",
        "777",
        "--resume",
    )
    hooks = calls[0]["hooks"]
    assert hooks.config.per_core_rate == 777.0 and hooks.append


def test_noscaling_observes_files_without_offloading(calls: list, tmp_path: Path) -> None:
    (tmp_path / "in" / "bid").mkdir(parents=True)
    sponge("run", "q1", "-o", str(tmp_path / "out"), "--input", str(tmp_path / "in"), "--policy", "noscaling")
    (call,) = calls
    assert call["config"].offload is None
    assert isinstance(call["hooks"].backlog, FileBacklog) and call["hooks"].backlog.sources == ("bid",)


def test_a_policy_on_files_follows_them_unless_told_not_to(calls: list, tmp_path: Path) -> None:
    """A policy watches a run that goes on: over files, the run follows them until stopped."""
    (tmp_path / "in" / "bid").mkdir(parents=True)
    run = ["run", "q1", "--input", str(tmp_path / "in")]
    sponge(*run, "-o", str(tmp_path / "a"), "--policy", "sponge")
    sponge(*run, "-o", str(tmp_path / "b"), "--policy", "sponge", "--no-follow")
    sponge(*run, "-o", str(tmp_path / "c"))
    sponge(*run, "-o", str(tmp_path / "d"), "--follow")
    assert [c["config"].follow for c in calls] == [True, False, False, True]
    assert calls[0]["hooks"].backlog.follow and not calls[1]["hooks"].backlog.follow


def test_without_policy_the_run_is_todays(calls: list, tmp_path: Path) -> None:
    sponge("run", "q1", "-o", str(tmp_path / "out"))
    assert calls[0]["hooks"] is None and calls[0]["config"].offload is None


def test_a_bad_policy_table_is_refused(calls: list, tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    (tmp_path / "sponge.toml").write_text("[policy]\nper_core_rate = 'fast'\n")
    with pytest.raises(SystemExit) as e:
        main(["run", "q1", "-o", str(tmp_path / "out"), "--rate", "1000", "--policy", "sponge"])
    assert e.value.code == 2 and not calls
    assert "[policy] per_core_rate is not a setting with a number value" in capsys.readouterr().err

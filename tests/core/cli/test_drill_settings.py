"""`sponge drill --config`: the settings file's [policy] rho reaches the drill's sponge runs."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from core.cli.main import app
from core.drill.drill import DrillConfig


class Captured(Exception):
    """Raised by the stand-in drill to stop the command once it has its configuration."""


def _drill_config(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, settings: str) -> DrillConfig:
    seen: list[DrillConfig] = []

    def drill(config: DrillConfig, **_: object) -> None:
        seen.append(config)
        raise Captured

    monkeypatch.setattr("core.drill.drill.run_drill", drill)
    monkeypatch.setattr("core.deployment.STACK_DIR", tmp_path / "no-stacks")
    (tmp_path / "sponge.toml").write_text(settings)
    args = ["drill", "--query", "q5", "--compare", "sponge", "--rate", "20000", "--config"]
    result = CliRunner().invoke(app, [*args, str(tmp_path / "sponge.toml"), "--report", str(tmp_path / "r")])
    assert isinstance(result.exception, Captured), result.output
    return seen[0]


def test_the_settings_files_rho_is_the_drills(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _drill_config(monkeypatch, tmp_path, "[policy]\nrho = 1.5\n").rho == 1.5


def test_without_rho_the_drill_keeps_the_querys_own(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert _drill_config(monkeypatch, tmp_path, '[data_plane]\ntransport = "tls"\n').rho is None

"""A worker deployed from these sources computes the agent's build; an edited source changes it."""

from __future__ import annotations

import io
import shutil
import zipfile
from pathlib import Path

from core.wire.build import CODE_PACKAGES, build_id
from infra.deploy.code_package import package_code


def test_the_deployed_package_has_the_agents_build(tmp_path: Path) -> None:
    data, _ = package_code()
    zipfile.ZipFile(io.BytesIO(data)).extractall(tmp_path / "task")
    assert build_id(tmp_path / "task") == build_id()


def test_an_edited_source_is_another_build_and_generated_modules_do_not_count(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[3]
    for package in CODE_PACKAGES:
        shutil.copytree(root / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    assert build_id(tmp_path) == build_id()
    generated = tmp_path / "core" / "wire" / "_generated" / "agent_pb2.py"
    generated.write_text(generated.read_text() + "\n# another grpcio-tools\n")
    assert build_id.__wrapped__(tmp_path) == build_id()
    edited = tmp_path / "merge" / "algebra.py"
    edited.write_text(edited.read_text() + "\n# a local edit\n")
    assert build_id.__wrapped__(tmp_path) != build_id()

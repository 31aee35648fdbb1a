"""The worker code as CloudFormation receives it: a deterministic zip, its sha256, CodeUri pointed at it.

By default the package is the project's sources (lambda_worker, merge, core with its generated gRPC
modules), without third-party wheels. That is what LocalStack's host executor runs (with an
interpreter that has the dependencies, docs/localstack.md) and what a Docker LocalStack or AWS runs
on top of a layer or image with them; `--code-dir` deploys a prepared directory instead (for AWS, the
sources plus the dependencies built for the function's architecture, or pass WorkerImageUri). The zip
is deterministic so that the same sources upload under the same content hash.
"""

from __future__ import annotations

import hashlib
import io
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

from core.deployment import PROJECT_ROOT
from core.errors import ConfigError, DeployError
from core.wire.build import code_files

_CODE_URI = re.compile(r"^(?P<indent>\s*)CodeUri:\s*(?P<value>[^\s#]+)\s*(?P<comment>#.*)?$", re.MULTILINE)
_ZIP_TIME = (1980, 1, 1, 0, 0, 0)  # fixed timestamps: the same sources give the same zip and hash


def _code_files(code_dir: Path | None) -> Iterator[tuple[Path, str]]:
    if code_dir is not None:
        for path in sorted(code_dir.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                yield path, path.relative_to(code_dir).as_posix()
        return
    yield from code_files(PROJECT_ROOT)


def package_code(code_dir: Path | None = None) -> tuple[bytes, str]:
    """The deployment zip (deterministic: fixed timestamps, sorted) and its sha256."""
    if code_dir is None and not (PROJECT_ROOT / "core" / "wire" / "_generated" / "agent_pb2.py").exists():
        raise ConfigError(
            "the generated gRPC modules are missing", hint="run make setup (core.wire.build_proto)"
        )
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path, name in _code_files(code_dir):
            info = zipfile.ZipInfo(name, _ZIP_TIME)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, path.read_bytes())
    data = buf.getvalue()
    return data, hashlib.sha256(data).hexdigest()


def rewrite_code_uri(template: str, s3_uri: str) -> str:
    """`CodeUri: <local path>` lines pointed at `s3_uri` (s3:// values are left alone).

    A line-level rewrite, not a YAML round trip: the template's short-form intrinsics (!Sub, !If ...)
    need a CloudFormation-aware loader, and the rest of the template must reach CloudFormation as
    written.
    """

    def sub(m: re.Match[str]) -> str:
        if m.group("value").startswith("s3://"):
            return m.group(0)
        return f"{m.group('indent')}CodeUri: {s3_uri}"

    out, n = _CODE_URI.subn(sub, template)
    if n == 0:
        raise DeployError("template.yaml has no CodeUri to point at the uploaded code")
    return out

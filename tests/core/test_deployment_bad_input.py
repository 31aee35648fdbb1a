"""A malformed stack file: every reader gets one ConfigError that names the file and says to deploy again.

The stack file is written by `sponge deploy` and read by `sponge run --target`, `status` and `destroy`.
Each case writes a damaged record where a deploy would have, and checks the reader's error, that the
command line prints it as one line (exit 2) and that the file is left as it was for the user to look at.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from core.deployment import Deployment, load_deployment, stack_file
from core.errors import ConfigError
from tests.core.cli.test_bad_arguments import assert_one_line_error, sponge

GOOD: dict[str, Any] = Deployment(
    target="localstack",
    stack_name="sponge",
    region="us-east-1",
    function_name="sponge-worker",
    endpoint_url="http://127.0.0.1:4566",
    log_group="/aws/lambda/sponge-worker",
).to_json()
GOOD_TEXT = json.dumps(GOOD, indent=2) + "\n"

CASES: dict[str, tuple[bytes, str]] = {  # name: (file content, what the error must say)
    "truncated": (GOOD_TEXT[: len(GOOD_TEXT) // 2].encode(), "is not valid JSON, truncated or edited?"),
    "empty": (b"", "is not valid JSON, truncated or edited?"),
    "not UTF-8": (b"\xff\xfe\x00garbage", "cannot read the stack file"),
    "a list": (b"[1, 2, 3]\n", "holds a JSON list, not an object"),
    "no function": (json.dumps({**GOOD, "function_name": ""}).encode(), "names no function"),
    "null function": (
        json.dumps({**GOOD, "function_name": None}).encode(),
        "'function_name' must be a string",
    ),
    "missing field": (
        json.dumps({k: v for k, v in GOOD.items() if k != "region"}).encode(),
        "lacks the field 'region'",
    ),
    "another target": (json.dumps({**GOOD, "target": "aws"}).encode(), "records a deployment to 'aws'"),
    "bad timeout": (json.dumps({**GOOD, "function_timeout_s": "soon"}).encode(), "not a deployment record"),
    "bad outputs": (json.dumps({**GOOD, "outputs": [1, 2]}).encode(), "not a deployment record"),
}


def _write(stack_dir: Path, content: bytes) -> Path:
    path = stack_file("localstack", stack_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


def test_a_whole_record_loads(tmp_path: Path) -> None:
    _write(tmp_path, GOOD_TEXT.encode())
    assert load_deployment("localstack", tmp_path).to_json() == GOOD


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_stack_file_names_the_file_and_says_to_deploy_again(tmp_path: Path, case: str) -> None:
    content, says = CASES[case]
    path = _write(tmp_path, content)
    with pytest.raises(ConfigError) as info:
        load_deployment("localstack", tmp_path)
    assert str(path) in info.value.message and says in info.value.message
    assert info.value.hint == "run sponge deploy --target localstack"
    assert info.value.__cause__ is None and (
        info.value.__context__ is None or info.value.__suppress_context__
    )  # no decoder traceback chained
    assert path.read_bytes() == content  # left for the user to look at, not removed or rewritten


@pytest.mark.parametrize("command", ["status", "destroy"])
@pytest.mark.parametrize("case", ["truncated", "missing field"])
def test_the_commands_that_read_it_print_one_line_and_keep_the_file(
    tmp_path: Path, command: str, case: str
) -> None:
    content, says = CASES[case]
    path = _write(tmp_path, content)
    result = sponge(command, "--target", "localstack", "--stack-dir", str(tmp_path))
    assert_one_line_error(result, str(path), says, "run sponge deploy --target localstack")
    assert path.read_bytes() == content

"""Entry point of the CDK app (`cd infra && cdk deploy`): one WorkerStack, the twin of template.yaml.

Why a function that builds the App: the tests synthesise the same app in-process with their own output
directory and code directory, and nothing is synthesised at import. The worker code is the directory
that template.yaml's CodeUri names (build/lambda, see docs/deploy-aws.md); `-c codeDir=PATH` points
elsewhere. Version reporting is off so the stack holds no CDK metadata resource beside the template's.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CODE_DIR = ROOT / "build" / "lambda"
DEFAULT_STACK = "sponge-workers"


def build_app(outdir: str | None = None, code_dir: Path | None = None, stack_name: str | None = None) -> Any:
    """The CDK App holding the worker stack (returned as aws_cdk.App; typed Any to keep imports lazy)."""
    import aws_cdk as cdk

    from infra.worker_stack import STACK_DESCRIPTION, WorkerStack

    app = cdk.App(outdir=outdir, analytics_reporting=False)
    code = Path(code_dir or app.node.try_get_context("codeDir") or DEFAULT_CODE_DIR)
    if not code.is_dir():
        raise SystemExit(
            f"error: the worker package {code} does not exist; build it first (docs/deploy-aws.md) "
            "or pass -c codeDir=PATH"
        )
    name = stack_name or app.node.try_get_context("stackName") or DEFAULT_STACK
    WorkerStack(
        app,
        name,
        code_dir=code,
        description=STACK_DESCRIPTION,
        env=cdk.Environment(
            account=os.environ.get("CDK_DEFAULT_ACCOUNT"), region=os.environ.get("CDK_DEFAULT_REGION")
        ),
    )
    return app


def main() -> None:
    build_app().synth()


if __name__ == "__main__":
    main()

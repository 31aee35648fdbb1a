"""`sponge deploy`, `sponge destroy`, `sponge status`: the deployment commands (logic in infra/deploy/).

Registered on the `sponge` app through the entry point `sponge.commands` (pyproject.toml), so the CLI
in core/ imports nothing from infra/. They share nothing with the streaming commands but the app and
the error conventions (one line with what to do, exit 2).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer

from core.console import err, out
from core.errors import ConfigError, SpongeError

TargetOpt = Annotated[
    str,
    typer.Option(
        "--target",
        "-t",
        help="localstack: the LocalStack on this machine (start it with `make localstack`); aws: the AWS "
        "account of your default credentials (AWS_PROFILE, environment, or an instance role).",
    ),
]
StackDirOpt = Annotated[
    Path,
    typer.Option(
        "--stack-dir", help="Where deployments are recorded (stack-<target>.json), read by `sponge run`."
    ),
]
DEFAULT_STACK_DIR = Path(".sponge")


@contextlib.contextmanager
def _aws_errors(target: str, endpoint: str | None) -> Iterator[None]:
    """botocore's failures as one-line errors that say what to do."""
    from botocore.exceptions import BotoCoreError, ClientError, EndpointConnectionError, NoCredentialsError

    from infra.deploy.aws_errors import Failure, classify, error_text

    try:
        yield
    except EndpointConnectionError:
        hint = (
            "start it with make localstack (a restarted LocalStack has forgotten its stacks: deploy again)"
            if target == "localstack"
            else "check the region and your network"
        )
        raise SpongeError(f"nothing answers at {endpoint or 'the AWS endpoint'}", hint=hint) from None
    except NoCredentialsError:
        raise SpongeError(
            "no AWS credentials found", hint="run aws configure, set AWS_PROFILE, or use an instance role"
        ) from None
    except ClientError as e:
        hint = "these credentials lack a permission this needs" if classify(e) is Failure.NOT_YOURS else ""
        raise SpongeError(error_text(e), hint=hint) from None
    except BotoCoreError as e:
        raise SpongeError(f"{type(e).__name__}: {e}") from None


def deploy(
    target: TargetOpt = "localstack",
    stack: Annotated[
        str, typer.Option("--stack", help="CloudFormation stack name; the function is STACK-worker.")
    ] = ("sponge"),
    region: Annotated[
        str | None,
        typer.Option(help="AWS region (aws: default from your configuration; localstack: us-east-1)."),
    ] = None,
    endpoint_url: Annotated[
        str | None,
        typer.Option("--endpoint-url", help="localstack: its URL (default: the one make localstack ran)."),
    ] = None,
    parameter: Annotated[
        list[str] | None,
        typer.Option(
            "--parameter",
            "-p",
            help="A template parameter KEY=VALUE, repeatable: WorkerTimeout=300, ReservedConcurrency=50, "
            "Architecture=arm64|x86_64, SubnetIds=a,b, SecurityGroupId=sg-..., ColdStartMode=none|snapstart|"
            "provisioned, WorkerImageUri=..., SparkClusterRoleName=... (template.yaml documents each).",
        ),
    ] = None,
    code_dir: Annotated[
        Path | None,
        typer.Option(
            "--code-dir",
            exists=True,
            file_okay=False,
            help="Deploy this directory as the function's code instead of the project's sources (aws: the "
            "sources plus dependencies built for the function's architecture).",
        ),
    ] = None,
    artifact_bucket: Annotated[
        str | None,
        typer.Option(
            "--artifact-bucket",
            help="S3 bucket the code and template are uploaded to, created if missing (default: "
            "sponge-artifacts-ACCOUNT-REGION; pick another when that name belongs to someone else).",
        ),
    ] = None,
    stack_dir: StackDirOpt = DEFAULT_STACK_DIR,
) -> None:
    """Deploy template.yaml: the Lambda workers, their log group, the staging bucket, the cluster's policy.

    Packages the worker code, uploads it, creates or updates the stack through CloudFormation (SAM
    transform) and records its outputs in STACK_DIR/stack-TARGET.json, where `sponge run --target
    TARGET` finds the function. Deploying again updates the stack.
    """
    from infra.deploy.stack import DeployConfig, parse_parameters
    from infra.deploy.stack import deploy as run_deploy

    if endpoint_url is not None and not endpoint_url.startswith(("http://", "https://")):
        # Checked before any client is made: boto3 refuses it with a bare ValueError (an unexpected failure).
        raise ConfigError(
            f"--endpoint-url {endpoint_url!r} is not an http(s) URL",
            hint="e.g. --endpoint-url http://127.0.0.1:4566",
        )
    config = DeployConfig.for_target(
        target,
        endpoint_url=endpoint_url,
        stack_name=stack,
        region=region,
        stack_dir=stack_dir,
        parameters=parse_parameters(parameter or []),
        code_dir=code_dir,
        artifact_bucket=artifact_bucket,
    )
    with _aws_errors(target, config.endpoint_url):
        deployment = run_deploy(config, progress=lambda line: err.print(line, markup=False))
    out.print(json.dumps(deployment.to_json(), indent=2))
    out.print(
        f"next: sponge run q5 --target {target} --offload-share 0.5 --output runs/q5-{target}", markup=False
    )


def destroy(target: TargetOpt = "localstack", stack_dir: StackDirOpt = DEFAULT_STACK_DIR) -> None:
    """Delete the deployed stack of TARGET (emptying its staging bucket first) and forget it."""
    from core.deployment import load_deployment
    from infra.deploy.stack import destroy as run_destroy

    deployment = load_deployment(target, stack_dir)
    with _aws_errors(target, deployment.endpoint_url):
        run_destroy(deployment, stack_dir, progress=lambda line: err.print(line, markup=False))


def status(
    target: Annotated[
        str | None,
        typer.Option(
            "--target",
            "-t",
            help="The deployed stack to show: localstack (the default) or aws. Not with --run.",
        ),
    ] = None,
    run: Annotated[
        Path | None,
        typer.Option(
            "--run",
            file_okay=False,
            help="Show a run instead: the --output directory of a `sponge run` (its live figures when "
            "started with --policy, its policy's last decisions, its summary once it ended).",
        ),
    ] = None,
    watch: Annotated[
        bool, typer.Option("--watch", "-w", help="With --run: refresh every second until Ctrl-C.")
    ] = False,
    stack_dir: StackDirOpt = DEFAULT_STACK_DIR,
    window: Annotated[int, typer.Option(min=1, help="Minutes of logs and metrics to look at.")] = 15,
    as_json: Annotated[bool, typer.Option("--json", help="Print everything as JSON.")] = False,
) -> None:
    """Show the deployed stack (status, outputs), its function, warm workers and recent invocations;
    with --run DIR, a run (live with --watch).

    Invocations come from the function's log group (one REPORT line each, cold ones with an Init
    Duration), the workers' own EMF metrics from the same logs, and Invocations/Errors/Throttles from
    CloudWatch's AWS/Lambda metrics. A run's figures come from its own files (OUTPUT/_status/,
    OUTPUT/_policy/decisions.jsonl, summary.json), so a run can be watched from any shell.
    """
    if run is not None:
        if target is not None:
            raise ConfigError("--run shows a run and --target a deployed stack", hint="pass one of them")
        _run_status(run, watch=watch, as_json=as_json)
        return
    if watch:
        raise ConfigError("--watch follows a run", hint="add --run DIR, the run's --output directory")
    target = target or "localstack"
    from core.deployment import load_deployment
    from infra.deploy.status import status as stack_status

    deployment = load_deployment(target, stack_dir)
    with _aws_errors(target, deployment.endpoint_url):
        report = stack_status(deployment, window_s=window * 60.0)
    if as_json:
        out.print(json.dumps(report, indent=2, default=str))
        return
    _print_status(report, target)
    if report["stack_status"] == "DOES_NOT_EXIST":
        raise ConfigError(
            f"stack {deployment.stack_name} no longer exists on {target}",
            hint=f"run sponge deploy --target {target}",
        )


def _run_status(run: Path, *, watch: bool, as_json: bool) -> None:
    """A run's status from its files (core/run_status.py); with `watch`, redrawn every second."""
    from core.run_status import read_status, render

    report = read_status(run)  # not a run: the error says what is missing, before any screen is drawn
    if as_json and not watch:
        out.print(json.dumps(report, indent=2, default=str), markup=False)
        return
    if not watch:
        for line in render(report):
            out.print(line, markup=False)
        return
    import time

    from rich.live import Live
    from rich.text import Text

    def view() -> Text:
        try:
            report = read_status(run)
        except SpongeError as e:  # the directory went away under the watch: say so, keep watching
            return Text(f"{run}: {e.one_line()}")
        if as_json:
            return Text(json.dumps(report, indent=2, default=str))
        return Text("\n".join([*render(report), "(Ctrl-C to stop watching)"]))

    with contextlib.suppress(KeyboardInterrupt), Live(view(), console=out, auto_refresh=False) as live:
        while True:
            time.sleep(1.0)
            live.update(view(), refresh=True)


def _print_status(r: dict[str, Any], target: str) -> None:
    out.print(f"stack {r['stack']} on {target}: {r['stack_status']}", markup=False)
    if "outputs" not in r:
        return
    for key, value in sorted(r["outputs"].items()):
        out.print(f"  {key:<22} {value}", markup=False)
    fn = r["function"]
    reserved = fn["reserved_concurrency"] if fn["reserved_concurrency"] is not None else "none"
    out.print(
        f"function {fn['name']}: {fn['state']}, {fn['runtime']}, {fn['memory_mb']} MB, "
        f"timeout {fn['timeout_s']} s, reserved concurrency {reserved}",
        markup=False,
    )
    minutes = r["window_s"] / 60
    warm = r["warm_workers"]
    warm_text = ", ".join(f"{k} = {v}" for k, v in warm.items() if k != "source")
    out.print(f"warm workers: {warm_text} ({warm['source']})", markup=False)
    m = r["metrics"]
    out.print(
        f"last {minutes:g} min: {r['invocations_in_window']} invocations logged; CloudWatch AWS/Lambda: "
        + ", ".join(f"{k} {v:g}" if v is not None else f"{k} n/a" for k, v in m.items()),
        markup=False,
    )
    emf = r["emf_metrics"]
    out.print(
        "workers' EMF metrics (Sponge): " + ", ".join(f"{k} {v:g}" for k, v in emf.items()), markup=False
    )
    if r["recent_invocations"]:
        out.print("recent invocations:", markup=False)
        for inv in r["recent_invocations"]:
            out.print(
                f"  {inv['at']}  {inv['request_id']}  {inv['duration_ms']:>10.1f} ms"
                f"  {'cold' if inv['cold_start'] else 'warm'}",
                markup=False,
            )


def register(app: typer.Typer) -> None:
    """Add `sponge deploy`, `destroy`, `status` to the app."""
    app.command()(deploy)
    app.command()(destroy)
    app.command()(status)

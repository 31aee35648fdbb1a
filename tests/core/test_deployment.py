from __future__ import annotations

from core.deployment import Deployment
from core.drill.drill import provisioned_environments


def _stack(**outputs: str) -> Deployment:
    return Deployment(
        target="aws",
        stack_name="sponge",
        region="us-east-1",
        function_name="sponge-worker",
        outputs=outputs,
    )


def test_provisioned_environments_come_from_the_stacks_output() -> None:
    """What a drill bills as standing Lambda cost: the template's ProvisionedEnvironments output."""
    assert _stack(ProvisionedEnvironments="4").provisioned_environments() == 4
    assert _stack(ProvisionedEnvironments="0").provisioned_environments() == 0
    assert _stack().provisioned_environments() == 0  # deployed before the template said


def test_the_embedded_fleet_has_none() -> None:
    assert provisioned_environments("embedded") == 0

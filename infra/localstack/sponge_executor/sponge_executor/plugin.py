"""The plux plugin LocalStack loads for LAMBDA_RUNTIME_EXECUTOR=sponge-host.

Why lazy: LocalStack lists every plugin of the namespace at start-up; only the chosen one is loaded,
so the executor module (and what it imports from LocalStack) is imported only when it is used.
"""

from __future__ import annotations

from localstack.services.lambda_.invocation.plugins import RuntimeExecutorPlugin

from sponge_executor import EXECUTOR_NAME


class HostRuntimeExecutorPlugin(RuntimeExecutorPlugin):
    name = EXECUTOR_NAME

    def load(self, *args: object, **kwargs: object) -> type:
        from sponge_executor.executor import HostRuntimeExecutor

        return HostRuntimeExecutor

"""LocalStack's Lambda functions as host processes: an executor plugin and a runtime-interface emulator.

Why: LocalStack's only built-in runtime executor starts each execution environment as a Docker
container, and there is no Docker engine on the machines this project is developed and tested on.
`plugin.py` registers `HostRuntimeExecutor` (executor.py) under the name `sponge-host`;
`runtime.py` is the process it starts per execution environment.
"""

EXECUTOR_NAME = "sponge-host"

"""Errors a user can act on: each carries a stable name and a hint that says what to do.

The CLI prints them as one line (`error: ... (hint)`) instead of a traceback.
"""

from __future__ import annotations


class SpongeError(Exception):
    """Base class; `hint` tells the user how to fix the problem."""

    def __init__(self, message: str, *, hint: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def one_line(self) -> str:
        return f"{self.message} ({self.hint})" if self.hint else self.message


class ConfigError(SpongeError):
    """A flag, option or configuration value is wrong."""


class PlanError(SpongeError):
    """A query or DAG is not well formed."""


class MissingDependencyError(SpongeError):
    """The machine lacks something the project needs (Java, a tool, a port)."""


class InputError(SpongeError):
    """Input data cannot be read."""


class DeployError(SpongeError):
    """CloudFormation refused or failed the deployment."""


class JvmDiedError(SpongeError):
    """Spark's JVM died under a run (out of memory, killed): the message names the cause from the JVM's
    log and the memory in force, the hint the flag that changes it (core/spark/jvm_failure.py)."""

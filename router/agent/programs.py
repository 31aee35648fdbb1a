"""The programs the agent has been told about, and their compiled form for the chunks it runs itself.

Why: a chunk names its program by id; the spec comes with the first chunk of a program and must hash
to that id, so that a worker and the agent's local fallback run exactly the same code.
"""

from __future__ import annotations

import threading

from core.errors import ConfigError
from core.wire.arrow_ipc import decode, encode
from lambda_worker.program import ProgramCache, ProgramSpec


class UnknownProgram(ConfigError):
    """A chunk names a program this agent was never told about (it restarted since, or the caller never
    sent the spec): unlike other bad requests, the caller can fix it by sending the spec again."""


class ProgramRegistry:
    """Program specs the agent has been told about, and their compiled form for local runs."""

    def __init__(self) -> None:
        self._specs: dict[str, str] = {}
        self._lock = threading.Lock()
        self.compiled = ProgramCache()

    def register(self, program_id: str, spec_json: str) -> str:
        """The spec JSON of `program_id`, registering `spec_json` if given (checked against the id)."""
        with self._lock:
            if spec_json:
                spec = ProgramSpec.loads(spec_json)
                if spec.program_id != program_id:
                    raise ConfigError(
                        f"program spec hashes to {spec.program_id}, not {program_id}",
                        hint="send ProgramSpec.program_id together with ProgramSpec.dumps()",
                    )
                self._specs[program_id] = spec.dumps()
            if program_id not in self._specs:
                raise UnknownProgram(
                    f"unknown program {program_id!r}", hint="send the program spec with the first chunk"
                )
            return self._specs[program_id]

    def run(self, program_id: str, payload: bytes, compression: str) -> tuple[bytes, int, int]:
        with self._lock:
            spec_json = self._specs[program_id]
            program = self.compiled.get_json(program_id, spec_json)
        table = decode(payload)
        out = program.run_table(table)
        return encode(out, compression), program.records_in(table), out.num_rows

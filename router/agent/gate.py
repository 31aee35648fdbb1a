"""The agent's door: a VM-side call is refused before its request is read unless it shows the secret.

Why an interceptor and not a check inside each method: a method's check runs only once the whole
request (up to 64 MiB) has been received and parsed, on one of the server's threads, so anyone who
reaches the port could make the agent read and hold large messages for nothing. The interceptor
sees the call's headers first and answers UNAUTHENTICATED there. The workers' stream (`Work`) is let
through: a worker proves itself with its token in the stream's first message, within the hello
timeout (router/agent/server.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from core.wire.protocol import ERROR_TYPE_METADATA, SECRET_METADATA, grpc_module, secret_matches

WORKER_METHODS = frozenset({"/sponge.agent.Agent/Work"})


def secret_gate(secret: bytes, rejected: Callable[[], None]) -> Any:
    """A server interceptor that refuses every call but the workers' without `secret` in its metadata;
    `rejected` is called for each refused call (the agent counts them)."""
    grpc = grpc_module()

    def refuse(request: Any, context: Any) -> Any:
        context.set_trailing_metadata(((ERROR_TYPE_METADATA, "WrongSecret"),))
        context.abort(grpc.StatusCode.UNAUTHENTICATED, "missing or wrong session secret")

    refusal = grpc.unary_unary_rpc_method_handler(refuse)

    class Gate(grpc.ServerInterceptor):  # type: ignore[misc, name-defined]
        def intercept_service(self, continuation: Any, details: Any) -> Any:
            if details.method in WORKER_METHODS:
                return continuation(details)
            presented = dict(details.invocation_metadata).get(SECRET_METADATA, "")
            if secret_matches(secret, presented):
                return continuation(details)
            rejected()
            return refusal

    return Gate()

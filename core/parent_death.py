"""Have the kernel SIGKILL a child process when its parent dies (Linux's PR_SET_PDEATHSIG).

Why: a parent that is SIGKILLed cleans nothing up, so the processes it started (the embedded Lambda
fleet's workers, a standalone Spark cluster's master and workers) would live on, holding CPUs, memory
and ports. psutil finds, watches and ends processes, but only while someone is alive to call it; asking
the kernel to end the child for us is prctl(2), which neither psutil nor the standard library wraps, so
it is called here through ctypes.

Linux sends the signal when the *thread* that forked the child ends, not its process: a caller that
forks from a short-lived thread must start its children from one thread that lives as long as they
should. Off Linux there is no such request: `arm` returns False and the caller decides what to do (the
embedded worker watches its parent from a thread; the Spark cluster relies on its stop()).

Kept free of third-party imports and cheap to import: the Lambda execution environment imports it
before the handler, on every cold start.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1  # linux/prctl.h


@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's prctl, or None off Linux or when libc cannot be loaded.

    Resolved once and cached: `preexec_fn` calls this in the parent, because dlopen or dlsym in a
    child forked from a threaded process may deadlock on a lock another thread held at the fork.
    """
    if not sys.platform.startswith("linux"):
        return None
    import ctypes  # only here: the import costs a cold start a few milliseconds

    try:
        prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return prctl


def arm(parent_pid: int) -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; True when that request is in place.

    Exits at once (status 1) when `parent_pid` is no longer this process's parent: the parent died
    before the request was made, and the kernel would never send the signal.
    """
    prctl = _prctl()
    armed = prctl is not None and prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    if os.getppid() != parent_pid:
        os._exit(1)
    return armed


def preexec_fn(then: Callable[[], None] | None = None) -> Callable[[], None]:
    """A subprocess `preexec_fn` that arms the signal in the child, then runs `then` (e.g. CPU pinning).

    Build it in the parent: it looks prctl up here, so the child only calls it. Which thread then forks
    (runs Popen) still matters, see the module docstring.
    """
    _prctl()
    parent = os.getpid()

    def child() -> None:
        arm(parent)
        if then is not None:
            then()

    return child

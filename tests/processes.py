"""The real servers the tests start (Prometheus, sshd, the control plane's components) end with the
test process however it ends: a killed or timed-out pytest leaves none of them behind.
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_the_tests() -> None:
    """`preexec_fn` for a server's Popen: SIGTERM it when the process that started it dies (Linux)."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)

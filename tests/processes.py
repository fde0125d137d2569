"""The real servers the tests start (Prometheus, sshd, the control plane's components) end with the
test process however it ends: a killed or timed-out pytest leaves none of them behind.
"""

from __future__ import annotations

import ctypes
import signal
import sys

PR_SET_PDEATHSIG = 1  # prctl(2)


def die_with_the_tests() -> None:
    """`preexec_fn` for a server's Popen: SIGKILL it when the process that started it dies (Linux)."""
    if sys.platform.startswith("linux"):
        # SIGKILL, not SIGTERM: a kube-apiserver told to stop while its etcd dies beside it waits on its
        # graceful shutdown for good (seen), and nothing of a test server's is worth ending cleanly.
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)

"""The exception tree and the exit codes, in one place.

    RunbookError                    anything runbook raises on purpose
    ├── InvalidInput                bad playbook, params, alert or config (exit 3)
    │   ├── TemplateError           a template failed to render or a value is missing
    │   │   └── LimitExceeded       (template_limits) a render past its bounds: steps, time, size
    │   ├── FlagError               (flags) a flag cannot be changed as asked
    │   ├── MissingBackend          (actions.base) the action needs a world the run was not given
    │   └── Malformed               a webhook body that can never be accepted (HTTP 400: not retried)
    ├── BackendError                a backend could not answer (exit 1)
    │   ├── BackendUnavailable      unreachable, timed out: never read as "healthy"
    │   │   ├── CoordinationUnavailable  the replicas' shared dedupe state cannot be reached (HTTP 503)
    │   │   ├── HostKeyRefused      (backends.ssh.session) a node's host key unknown or changed: nothing sent
    │   │   ├── StaleConnection     (backends.ssh.session) a cached connection opens no session: nothing ran
    │   │   └── DeadlinePassed      (backends.ssh.deadline) a node command's phase outlived its deadline
    │   │       └── CommandTimedOut (backends.ssh.session) the command was ended at its deadline
    │   ├── DamagedHistory          (journal) a journal line that may record a change to the target is unreadable
    │   ├── NotFound                the object asked for does not exist
    │   ├── Conflict                the object changed underneath us (re-read, re-plan)
    │   │   └── StalePlan           what a plan was computed from no longer holds: plan again
    │   └── CommandFailed           a command ran but could not be completed
    ├── ParseError                  (parsers.errors) a command's output did not have the expected shape
    ├── Refused                     a guard or the operator said no (exit 4)
    ├── Busy                        not now: the run queue is full (HTTP 503 with Retry-After)
    │   └── ClaimedElsewhere        another replica is taking this delivery right now (503, retry soon)
    ├── Rejected                    an HTTP request refused before its body is used (401, 404, 413, 415)
    ├── JournalError                the journal could not be written (exit 1)
    ├── NotConfigured               a backend the command needs is not configured (exit 2)
    └── UnsafeStateDir              a state directory others could steer (exit 2)

The CLI maps these to exit codes at the edge; the engine turns them into step outcomes. The few
defined beside their one user say where, in brackets; `tests/test_import_contract.py` checks that
every exception runbook defines is drawn here (pydantic validators' ValueErrors aside).
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0
    FAILED = 1
    USAGE = 2
    INVALID = 3
    REFUSED = 4
    FIRING = 10  # triage without --run: a playbook's condition holds
    FINDINGS = 10  # advise: a launch flag goes against the SOP (the same 10 as FIRING: something to act on)
    BLIND = 11  # triage without --run: a metrics source could not be read, and nothing fires
    NO_SOURCE = 12  # triage without --run: a signal a playbook needs has no source here (no exporter), nothing fires
    INTERRUPTED = 130


class RunbookError(Exception):
    """Base of every error runbook raises on purpose."""

    exit_code = ExitCode.FAILED


class InvalidInput(RunbookError):
    exit_code = ExitCode.INVALID


class TemplateError(InvalidInput):
    pass


class Malformed(InvalidInput):
    """The payload can never be accepted as it is: answered 400, and the sender should not retry."""


class BackendError(RunbookError):
    pass


class BackendUnavailable(BackendError):
    pass


class CoordinationUnavailable(BackendUnavailable):
    """The shared state (the Kubernetes API) cannot be reached: answered 503 so the sender retries."""


class NotFound(BackendError):
    pass


class Conflict(BackendError):
    pass


class StalePlan(Conflict):
    """The target is no longer what the plan saw (another hand changed it): re-read and plan again."""


class CommandFailed(BackendError):
    pass


class Refused(RunbookError):
    exit_code = ExitCode.REFUSED

    def __init__(self, guard: str, reason: str):
        super().__init__(f"refused by guard {guard}: {reason}")
        self.guard = guard
        self.reason = reason


class Busy(RunbookError):
    """The run queue is full: answered 503 with Retry-After, before anything is written."""


class ClaimedElsewhere(Busy):
    """Another replica is taking this delivery right now: answered 503 with a short Retry-After."""


class Rejected(RunbookError):
    """An HTTP request refused before its body is used: the status, a verdict for /metrics, and why."""

    def __init__(self, status: int, verdict: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.verdict, self.message, self.headers = status, verdict, message, headers or {}


class JournalError(RunbookError):
    pass


class NotConfigured(RunbookError):
    """Prometheus, a cluster or the SSH nodes a command needs are not configured: nothing was started."""

    exit_code = ExitCode.USAGE


class UnsafeStateDir(RunbookError):
    """The state directory is writable or owned by someone else, or is their link: the message says the fix."""

    exit_code = ExitCode.USAGE

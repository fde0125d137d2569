"""A bounded queue of incident ids and a few threads that run them, one run per incident at a time.

The store is the truth (an incident waits in it until a worker claims it); the queue is only
what this process will do next, so a full queue or a restart loses nothing. A run that holds its
thread past the worker deadline is reported as overdue (readiness), never killed: it may be mid-change.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable

from runbook.clock import Clock, SystemClock
from runbook.model.duration import format_duration

log = logging.getLogger("runbook.webhook")


class Worker:
    def __init__(self, handle: Callable[[str], None], *, size: int, threads: int, deadline: float | None = None,
                 clock: Clock | None = None, before_run: Callable[[], object] | None = None):
        self.handle, self.size, self.threads, self.deadline = handle, size, threads, deadline
        self.before_run = before_run  # called before each run starts (the intake gate: deliveries first)
        # the runs' own clock: a run whose steps wait 5 virtual minutes is 5 minutes old, on either clock
        self.clock = clock or SystemClock()
        self._queue: queue.Queue[str | None] = queue.Queue()
        self._lock = threading.Condition()
        self._queued: set[str] = set()
        self._active: dict[str, float] = {}  # incident -> when its run started (clock.monotonic)
        self._threads: list[threading.Thread] = []

    def offer(self, incident: str) -> bool:
        """Queue an incident unless it is queued or running already; False when the queue is full."""
        with self._lock:
            if incident in self._queued or incident in self._active:
                return True
            if len(self._queued) >= self.size:
                return False
            self._queued.add(incident)
        self._queue.put(incident)
        return True

    def room(self) -> int:
        with self._lock:
            return self.size - len(self._queued)

    def backlog(self) -> int:
        with self._lock:
            return len(self._queued)

    def start(self) -> None:
        for n in range(self.threads):
            thread = threading.Thread(target=self._loop, name=f"runbook-webhook-worker-{n}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self, timeout: float) -> bool:
        """Ask the threads to stop after their current run; True when all stopped in time."""
        for _ in self._threads:
            self._queue.put(None)
        deadline = time.monotonic() + timeout
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        return not any(t.is_alive() for t in self._threads)

    def alive(self) -> bool:
        return bool(self._threads) and all(t.is_alive() for t in self._threads)

    def overdue(self) -> list[tuple[str, float]]:
        """(incident, seconds running) for each run past the worker deadline, oldest first."""
        if self.deadline is None:
            return []
        now = self.clock.monotonic()
        with self._lock:
            running = [(incident, now - since) for incident, since in self._active.items()]
        return sorted(((i, age) for i, age in running if age > self.deadline), key=lambda item: -item[1])

    def problems(self) -> list[str]:
        """Why the workers cannot take new runs: not running, or held by runs past their deadline."""
        found = [] if self.alive() else ["the run workers are not running"]
        for incident, age in self.overdue():
            found.append(f"a run worker has been held by incident {incident} for {format_duration(age)}, past "
                         f"webhook.worker_deadline ({format_duration(self.deadline or 0)}): a backend may not be "
                         f"answering; it is ready again when that run ends")
        return found

    def wait_idle(self, timeout: float) -> bool:
        """Block until nothing is queued or running (tests and shutdown); False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._queued or self._active:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._lock.wait(left)
        return True

    def _loop(self) -> None:
        while True:
            incident = self._queue.get()
            if incident is None:
                return
            with self._lock:
                self._queued.discard(incident)
                busy = incident in self._active  # another thread has it; the store's claim would refuse too
                if not busy:
                    self._active[incident] = self.clock.monotonic()
                self._lock.notify_all()
            if busy:
                continue
            try:
                if self.before_run is not None:
                    self.before_run()
                self.handle(incident)
            except Exception:  # a bug in one run must not take the worker down with it
                log.exception("the run of incident %s failed unexpectedly", incident)
            finally:
                with self._lock:
                    self._active.pop(incident, None)
                    self._lock.notify_all()

"""Bounded loopback load test of `runbook serve`: 200 deliveries/s for 20 s, 20% duplicates.

Starts the server in a subprocess (uvicorn, a fake world, a diagnostics-only playbook, a fresh
state directory), sends signed PagerDuty and authenticated Alertmanager deliveries on a fixed
schedule, retries a 503 the way the senders do, then checks from the journals that every unique
delivery was recorded and run exactly once, and prints the p50/p99 ack latency. Not a CI test:

    python bench/webhook_load.py [--rate 200] [--seconds 20] [--duplicates 0.2]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import os
import random
import resource
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ACK_P99_TARGET_MS = 50.0  # every delivery still journaled and fsynced before its 2xx
PD_SECRET = b"bench-pagerduty-secret-0123456789"
AM_TOKEN = "bench-alertmanager-token-0123456789"
PLAYBOOK = """
name: bench-diagnose
title: Bench alert, diagnostics only
match: {alerts: [BenchAlert], titles: ["(?i)bench"], labels: {namespace: namespace}}
params: {namespace: llm}
steps:
  - id: oom
    uses: prom.query
    with: {signal: oom_failures_per_min}
  - id: note
    uses: flow.note
    with: {message: diagnosed}
"""


def run_server(state: Path, port_file: Path, workers: int, group_commit: bool = True, runs: bool = True) -> None:
    import uvicorn

    from runbook.backends.base import World
    from runbook.loading.validation import load_playbook_text
    from runbook.actions import load_builtin
    from runbook.sim.fakes import FakeMetrics
    from runbook.webhook.app import create_app
    from runbook.webhook.service import Service
    from runbook.webhook.settings import Secrets, WebhookConfig

    book = load_playbook_text(PLAYBOOK, file="bench.yaml", registry=load_builtin()).playbook
    service = Service(config=WebhookConfig(workers=workers, queue_size=20_000),
                      secrets=Secrets(pagerduty=(PD_SECRET,), alertmanager=(AM_TOKEN,)), state=state,
                      world=World(metrics=FakeMetrics({"oom_failures_per_min": 3.0})), playbooks=[book], env={},
                      # the Alertmanager deliveries name namespaces ns-0..ns-49 and the PagerDuty ones
                      # run in the playbook's default, llm: this server may act in all of them (without
                      # this the namespace guard refuses them, rightly, and half the deliveries never run)
                      namespaces=["llm", *(f"ns-{n}" for n in range(50))])
    if not group_commit:  # the contrast: every delivery commits alone, as before issue 33
        service.intake.batches.most = 1
    if not runs:  # the ack path alone: the run workers never start, so the runs stay queued in the store
        service.worker.start = lambda: None  # type: ignore[method-assign]
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port_file.write_text(str(sock.getsockname()[1]))
    uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning", access_log=False,
                                  lifespan="on")).run(sockets=[sock])


def run_floor_server(state: Path, port_file: Path) -> None:
    """The floor: the same loopback load answered by the barest server that keeps the same promise.

    asyncio streams and no framework, no parsing, no signature or token check; for each delivery one
    SQLite commit (WAL, synchronous=FULL) of its dedupe key and, when it is new, its journal as
    `runbook serve` makes one: a new folder (its parent fsynced), a new file (the folder fsynced),
    the line (fsynced), before the 2xx; 8 threads for the files, so their fsyncs overlap.
    """
    import asyncio
    import hashlib
    import sqlite3

    def fsync_dir(path: Path) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)

    incidents = state / "incidents"
    incidents.mkdir(parents=True, mode=0o700)
    db = sqlite3.connect(state / "floor.sqlite3", isolation_level=None, check_same_thread=False)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE seen (key TEXT PRIMARY KEY)")
    lock = threading.Lock()
    files = concurrent.futures.ThreadPoolExecutor(8)

    def durable(body: bytes) -> int:
        key = hashlib.sha256(body).hexdigest()
        with lock:
            db.execute("BEGIN IMMEDIATE")
            new = db.execute("INSERT OR IGNORE INTO seen VALUES (?)", (key,)).rowcount
            db.execute("COMMIT")
        if not new:
            return 200
        folder = incidents / key[:24]
        os.mkdir(folder, 0o700)
        fsync_dir(incidents)
        fd = os.open(folder / "journal.jsonl", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND, 0o600)
        try:
            fsync_dir(folder)
            os.write(fd, body + b"\n")
            os.fsync(fd)
        finally:
            os.close(fd)
        return 202

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = next(int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                              if line.lower().startswith(b"content-length:"))
                status = await loop.run_in_executor(files, durable, await reader.readexactly(length))
                writer.write(b"HTTP/1.1 %d Accepted\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}"
                             % status)
        except (asyncio.IncompleteReadError, ConnectionError):
            writer.close()

    async def serve() -> None:
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        server = await asyncio.start_server(answer, sock=sock)
        port_file.write_text(str(sock.getsockname()[1]))
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(serve())


def deliveries(count: int) -> list[tuple[str, bytes, dict[str, str], str]]:
    """(path, body, headers, event key) for `count` unique deliveries, half from each source."""
    from runbook.webhook.pagerduty import sign

    out = []
    for i in range(count):
        if i % 2:
            body = json.dumps({"event": {"id": f"EV{i:08d}", "event_type": "incident.triggered",
                                         "resource_type": "incident", "occurred_at": "2026-03-14T03:12:07Z",
                                         "data": {"id": f"PINC{i:06d}", "title": f"Bench alert {i}", "status": "triggered",
                                                  "service": {"id": "PBENCH1", "summary": "bench"}}}}).encode()
            headers = {"Content-Type": "application/json", "X-Webhook-Id": f"wh-{i:08d}",
                       "X-PagerDuty-Signature": sign(body, PD_SECRET)}
            out.append(("/webhooks/pagerduty", body, headers, f"pd-event|EV{i:08d}"))
        else:
            starts = "2026-03-14T03:12:07Z"
            body = json.dumps({"version": "4", "status": "firing", "receiver": "runbook", "groupKey": f"{{}}:{{n=\"{i}\"}}",
                               "alerts": [{"status": "firing", "labels": {"alertname": "BenchAlert", "namespace": f"ns-{i % 50}",
                                                                          "n": str(i)},
                                           "annotations": {}, "startsAt": starts, "endsAt": "0001-01-01T00:00:00Z",
                                           "fingerprint": f"{i:016x}"}]}).encode()
            headers = {"Content-Type": "application/json", "Authorization": f"Bearer {AM_TOKEN}"}
            out.append(("/webhooks/alertmanager", body, headers, f"am-alert|{i:016x}|2026-03-14T03:12:07+00:00|firing"))
    return out


class Sender:
    """One keep-alive connection per thread; a 503 is retried after a short pause, as senders do."""

    def __init__(self, port: int):
        self.port, self.local = port, threading.local()

    def send(self, path: str, body: bytes, headers: dict[str, str]) -> tuple[int, float, int]:
        retries = 0
        while True:
            conn = getattr(self.local, "conn", None) or http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
            self.local.conn = conn
            started = time.perf_counter()
            try:
                conn.request("POST", path, body=body, headers=headers)
                response = conn.getresponse()
                response.read()
            except (OSError, http.client.HTTPException):
                conn.close()
                self.local.conn = None
                retries += 1
                continue
            elapsed = time.perf_counter() - started
            if response.status == 503 and retries < 20:
                retries += 1
                time.sleep(0.5)
                continue
            return response.status, elapsed, retries


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--duplicates", type=float, default=0.2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--drain-timeout", type=float, default=180.0)
    parser.add_argument("--no-group-commit", action="store_true", help="commit each delivery alone (the contrast)")
    parser.add_argument("--no-runs", action="store_true", help="never start the runs: time the ack path alone")
    parser.add_argument("--floor", action="store_true",
                        help="the barest server making the same writes durable (see run_floor_server), not runbook")
    parser.add_argument("--serve", nargs=2, metavar=("STATE", "PORT_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve and args.floor:
        run_floor_server(Path(args.serve[0]), Path(args.serve[1]))
        return 0
    if args.serve:
        run_server(Path(args.serve[0]), Path(args.serve[1]), args.workers, not args.no_group_commit, not args.no_runs)
        return 0
    sys.path.insert(0, str(ROOT))
    from runbook.record.journal import journal_paths, read_journal

    total = int(args.rate * args.seconds)
    rng = random.Random(8)
    unique = deliveries(total - int(total * args.duplicates))
    plan, sent_unique = [], 0
    for n in range(total):
        if sent_unique and (rng.random() < args.duplicates or sent_unique == len(unique)) and n - sent_unique < total - len(unique):
            plan.append(unique[rng.randrange(sent_unique)])  # a redelivery of one already sent
        else:
            plan.append(unique[sent_unique])
            sent_unique += 1
    with tempfile.TemporaryDirectory(prefix="runbook-bench-") as tmp:
        state, port_file = Path(tmp) / "state", Path(tmp) / "port"
        server = subprocess.Popen([sys.executable, __file__, "--serve", str(state), str(port_file),
                                   "--workers", str(args.workers),
                                   *(["--no-group-commit"] if args.no_group_commit else []),
                                   *(["--no-runs"] if args.no_runs else []),
                                   *(["--floor"] if args.floor else [])], cwd=ROOT,
                                  env={**os.environ, "PYTHONPATH": str(ROOT)})
        try:
            deadline = time.monotonic() + 30
            while not (port_file.exists() and port_file.read_text()):
                if server.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit("the server did not start")
                time.sleep(0.05)
            sender = Sender(int(port_file.read_text()))
            time.sleep(0.5)
            results: list[tuple[int, float, int]] = []
            start = time.perf_counter()
            with concurrent.futures.ThreadPoolExecutor(max_workers=64) as pool:
                futures = []
                for n, (path, body, headers, _) in enumerate(plan):
                    delay = start + n / args.rate - time.perf_counter()
                    if delay > 0:
                        time.sleep(delay)
                    futures.append(pool.submit(sender.send, path, body, headers))
                results = [f.result() for f in futures]
            sending = time.perf_counter() - start
            drained = time.perf_counter()
            done, commits = 0.0, {}
            while time.perf_counter() - drained < args.drain_timeout and not args.floor:
                conn = http.client.HTTPConnection("127.0.0.1", sender.port, timeout=10)
                conn.request("GET", "/metrics")
                text = conn.getresponse().read().decode()
                conn.close()
                done = sum(float(line.split()[-1]) for line in text.splitlines()
                           if line.startswith("runbook_webhook_runs_total"))
                commits = {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
                           if line.startswith(("runbook_webhook_commit_deliveries_sum",
                                               "runbook_webhook_commit_deliveries_count"))}
                if done >= len(unique) or args.no_runs:
                    break
                time.sleep(0.5)
            drain = time.perf_counter() - drained
        finally:
            server.send_signal(signal.SIGTERM)
            server.wait(timeout=60)
            used = resource.getrusage(resource.RUSAGE_CHILDREN)  # the server's, once it has exited
            mine = resource.getrusage(resource.RUSAGE_SELF)
        received: dict[str, int] = {}
        runs: dict[str, int] = {}
        floor_journals = sum(1 for _ in (state / "incidents").glob("*/journal.jsonl")) if args.floor else 0
        for path in ([] if args.floor else journal_paths(state)):
            for event in read_journal(path).events:
                if event.type == "alert.received":
                    key = event.data["delivery"]["event_key"]
                    received[key] = received.get(key, 0) + 1
                elif event.type == "run.started":
                    runs[event.incident] = runs.get(event.incident, 0) + 1
    latencies = sorted(r[1] * 1000 for r in results)
    statuses: dict[int, int] = {}
    for status, _, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    if args.floor:
        print(f"the floor (--floor: the barest server, not runbook): sent {len(plan)} in {sending:.1f}s; answers "
              f"{dict(sorted(statuses.items()))}; journals {floor_journals} for {len(unique)} unique deliveries")
        print(f"floor ack latency ms: p50 {statistics.median(latencies):.2f}  "
              f"p99 {latencies[int(len(latencies) * 0.99) - 1]:.2f}  max {latencies[-1]:.2f}")
        print(f"CPU seconds: the floor server {used.ru_utime:.1f} user + {used.ru_stime:.1f} system over {sending:.1f}s")
        ok = floor_journals == len(unique) and set(statuses) <= {200, 202}
        print("OK" if ok else "FAILED")
        return 0 if ok else 1
    lost = [key for _, _, _, key in unique if key not in received]
    twice = [key for key, n in received.items() if n > 1]
    print(f"sent {len(plan)} deliveries in {sending:.1f}s ({len(plan) / sending:.0f}/s): {len(unique)} unique, "
          f"{len(plan) - len(unique)} duplicates; answers {dict(sorted(statuses.items()))}; "
          f"retries {sum(r[2] for r in results)}")
    print(f"ack latency ms: p50 {statistics.median(latencies):.2f}  p99 {latencies[int(len(latencies) * 0.99) - 1]:.2f}  "
          f"max {latencies[-1]:.2f}")
    batches = commits.get("runbook_webhook_commit_deliveries_count", 0.0)
    print(f"commits {batches:.0f}: {commits.get('runbook_webhook_commit_deliveries_sum', 0.0) / max(batches, 1):.2f} "
          f"deliveries each" + (" (group commit off)" if args.no_group_commit else ""))
    if args.no_runs:
        print("runs: off (--no-runs), the ack path alone")
    else:
        print(f"runs finished {done:.0f} (drained in {drain:.1f}s after the last send); incidents run once: "
              f"{sum(1 for n in runs.values() if n == 1)}, more than once: {sum(1 for n in runs.values() if n > 1)}")
    print(f"lost: {len(lost)}; journaled twice: {len(twice)}")
    print(f"CPU seconds: the server {used.ru_utime:.1f} user + {used.ru_stime:.1f} system, this load generator "
          f"{mine.ru_utime + mine.ru_stime:.1f}, over {sending + drain:.1f}s ({os.cpu_count()} cores)")
    p99 = latencies[int(len(latencies) * 0.99) - 1]
    print(f"webhook ack p99 {p99:.1f} ms at {args.rate:g}/s (target ≤ {ACK_P99_TARGET_MS:g} ms, issue 33) "
          f"{'met' if p99 <= ACK_P99_TARGET_MS else 'NOT met'}")
    ran_once = not runs if args.no_runs else len(runs) == len(unique) and all(n == 1 for n in runs.values())
    ok = not lost and not twice and ran_once
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())

"""The service's Prometheus metrics, in a registry of its own (several apps can live in one process).

Webhook answers by source and HTTP status, deliveries by source and verdict, duplicates, runs by
outcome, actions by result, queue depth, runs past the worker deadline, the ack latency, and how many
deliveries each commit took.
"""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
ACK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)


class Metrics:
    content_type = CONTENT_TYPE_LATEST

    def __init__(self, backlog: Callable[[], int], overdue: Callable[[], int] = lambda: 0):
        self.registry = CollectorRegistry()
        self.responses = Counter("runbook_webhook_responses", "Webhook answers, by source and HTTP status code.",
                                 ["source", "status"], registry=self.registry)
        self.deliveries = Counter("runbook_webhook_deliveries", "Deliveries answered, by source and verdict.",
                                  ["source", "verdict"], registry=self.registry)
        self.duplicates = Counter("runbook_webhook_duplicates", "Alerts or events already seen, by source.",
                                  ["source"], registry=self.registry)
        self.runs = Counter("runbook_webhook_runs", "Playbook runs finished, by outcome.", ["outcome"],
                            registry=self.registry)
        self.actions = Counter("runbook_webhook_actions", "Remediations by result: applied, proposed, refused.",
                               ["result"], registry=self.registry)
        self.queue_depth = Gauge("runbook_webhook_queue_depth", "Incidents waiting for a worker.",
                                 registry=self.registry)
        self.queue_depth.set_function(lambda: float(backlog()))
        self.runs_overdue = Gauge("runbook_webhook_runs_overdue",
                                  "Runs holding a worker past webhook.worker_deadline (a backend not answering).",
                                  registry=self.registry)
        self.runs_overdue.set_function(lambda: float(overdue()))
        self.ack_seconds = Histogram("runbook_webhook_ack_seconds", "Time from request to answer, by source.",
                                     ["source"], buckets=ACK_BUCKETS, registry=self.registry)

        self.commit_deliveries = Histogram("runbook_webhook_commit_deliveries",
                                           "Deliveries committed together, per commit (group commit).",
                                           buckets=BATCH_BUCKETS, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)

"""`runbook serve`: PagerDuty and Alertmanager webhooks in, journaled and deduplicated, runs out.

Modules stay small: payloads and signatures (`pagerduty`, `alertmanager`), the durable store,
the ack path (`intake`), the worker and policy, restart recovery, and the routes (`app`).
"""

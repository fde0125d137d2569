"""Signals: the names playbooks use (`waiting_requests`, `oom_failures_per_min`, …) and the
PromQL each stands for, from bundled profiles (`vllm`, `article`) and the config file.

`runbook.signals.catalog.build_catalog(config)` gives the catalog in effect.
"""

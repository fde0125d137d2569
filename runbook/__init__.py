"""runbook: incident response for vLLM serving.

Declarative YAML playbooks run by a pure engine against injected backends, with hard guards,
verification, rollback and an append-only incident journal that becomes the RCA report.
"""

__version__ = "0.1.0"

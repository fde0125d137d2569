"""Loading playbooks: safe YAML with positions, and problems reported in the playbook's words.
See `runbook.loading.yamlsource` (reading) and `runbook.loading.problems` (reporting)."""

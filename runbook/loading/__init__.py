"""Loading playbooks: safe YAML with positions, and problems reported in the playbook's words.
See `runbook.files.yamlsource` (reading) and `runbook.files.problems` (reporting)."""

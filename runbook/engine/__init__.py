"""Running a playbook: steps, guards, templating, verification and rollback; no I/O of its own."""

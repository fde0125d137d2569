"""Drills: run a bundled playbook against a simulated world on virtual time.

Scenario files (`runbook/scenarios/*.yaml`) describe the world; `scenario.build_world` makes it.
"""

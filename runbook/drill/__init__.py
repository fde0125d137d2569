"""Drills: run a bundled playbook against a simulated world on virtual time.

Scenario files (`runbook/scenarios/*.yaml`) describe the world; `runbook.sim.world.build_world` makes it.
"""

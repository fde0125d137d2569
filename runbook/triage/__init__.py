"""Triage: which playbook's condition holds right now (`evaluate`), the SOP's step-1 views
(`views`), and the same conditions exported as Prometheus alerting rules (`rules`).
"""

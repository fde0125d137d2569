"""Typed, immutable values: playbooks, durations, journal events. No I/O here."""

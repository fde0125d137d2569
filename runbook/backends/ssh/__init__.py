"""The GPU nodes over SSH: inventory, sessions, one deadline per command."""

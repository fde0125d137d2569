"""Plain HTTP probes of serving endpoints."""

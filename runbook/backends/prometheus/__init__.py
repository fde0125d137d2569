"""The Prometheus world: instant and range queries, and how to reach the server."""

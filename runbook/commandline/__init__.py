"""The serving workload's command line: vLLM's flags in an argv (as Kubernetes and Compose spell it),
the Compose file that holds it, and the `docker compose` commands that restart it."""

"""The YAML files a user writes and the bundled ones: read safely with each value's position, problems
that say where and how to fix them, and where the config, playbooks and scenarios are found."""

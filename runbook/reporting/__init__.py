"""Reports from journals: the RCA context (pure) and its rendering through Jinja2 templates."""

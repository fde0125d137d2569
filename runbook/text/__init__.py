"""A playbook's text: the sandboxed Jinja templates it renders, their limits, and the checks on the
values from outside (alert labels, `-p`) that reach them."""

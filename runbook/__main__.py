"""`python -m runbook`: the same entry point as the console script."""

from runbook.cli import main

main()

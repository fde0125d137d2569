"""The incident's record and what the guards read of it: the journal, the history of applied changes,
the target locks, secret redaction, and the safe file writes they stand on."""

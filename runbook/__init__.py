"""runbook: incident response for vLLM serving.

Declarative YAML playbooks run by a pure engine against injected backends, with hard guards,
verification, rollback and an append-only incident journal that becomes the RCA report.

The packages are the layers, top first; each imports only those below (tests/test_import_contract.py):

    cli
    triage | webhook | drill
    engine
    actions | sim
    commandline                              the workload's command line and Compose file
    backends | loading | reporting
    config | advise | text | signals         text: a playbook's templates and outside values
    files                                    the YAML files people write, and where they are
    settings
    record | parsers                         record: journal, history, locks, redaction
    model
    errors, clock
"""

__version__ = "0.1.0"

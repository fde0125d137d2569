"""`runbook serve` and `runbook approve` from the command line; start-up stays free of heavy imports."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from runbook.cli.serve import approve, serve
from runbook.errors import InvalidInput
from tests.webhook.helpers import OPERATOR_TOKEN, pd_event, pd_headers, request
from tests.webhook.helpers import serve as serving


def test_help_imports_no_server_library():
    code = ("import sys; from runbook.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('starlette', 'uvicorn', 'prometheus_client', 'sqlite3') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_serve_refuses_to_start_with_nothing_to_receive(monkeypatch):
    monkeypatch.delenv("RUNBOOK_PAGERDUTY_SECRET", raising=False)
    monkeypatch.delenv("RUNBOOK_ALERTMANAGER_TOKEN", raising=False)
    result = CliRunner().invoke(serve, [])
    assert result.exit_code == 2 and "RUNBOOK_PAGERDUTY_SECRET" in result.output


def test_secrets_are_never_flags():
    result = CliRunner().invoke(serve, ["--help"])
    assert "--pagerduty-secret-file" in result.output and "--pagerduty-secret " not in result.output


def test_approve_against_the_server(tmp_path, monkeypatch):
    monkeypatch.setenv("RUNBOOK_OPERATOR_TOKEN", OPERATOR_TOKEN)
    with serving(tmp_path / "state") as srv:
        body = pd_event()
        incident = request(srv.url, "POST", "/webhooks/pagerduty", body, pd_headers(body)).body["alerts"][0]["incident"]
        srv.wait_idle()
        missing = CliRunner().invoke(approve, [incident, "observe", "--server", srv.url])
        # `runbook` turns InvalidInput into exit code 3 (the group is bypassed here).
        assert isinstance(missing.exception, InvalidInput) and "no proposal" in str(missing.exception)
        result = CliRunner().invoke(approve, [incident, "scale-down", "--server", srv.url, "--operator", "bob",
                                              "--wait", "20"])
        assert result.exit_code == 0, result.output
        assert "applied" in result.output
        # The token is bound to alice, so the server records alice whatever the caller claims.
        assert srv.service.proposal(incident, "scale-down")["by"] == "alice"


def test_the_startup_line_says_what_is_received_in_words_never_a_repr():
    from runbook.cli.serve import _receiving
    from runbook.webhook.settings import OperatorToken, Secrets

    both = Secrets(pagerduty=(b"s" * 20,), alertmanager=("t" * 20,), operators=(OperatorToken("alice", "o" * 20),))
    assert _receiving(both) == ("Alertmanager at /webhooks/alertmanager and PagerDuty at /webhooks/pagerduty; "
                                "1 operator token(s) for approvals")
    assert _receiving(Secrets(alertmanager=("t" * 20,))) == "Alertmanager at /webhooks/alertmanager; no approvals"
    assert "Secrets(" not in _receiving(both) and "t" * 20 not in _receiving(both)


def test_serve_help_documents_the_webhook_paths():
    from click.testing import CliRunner

    from runbook.cli import main

    out = CliRunner().invoke(main, ["serve", "--help"]).output
    assert "POST /webhooks/alertmanager" in out and "POST /webhooks/pagerduty" in out and "/readyz" in out

"""Finding 4 of issue 13, at rest: secrets planted in an alert appear nowhere under the state
directory (the SQLite file, its -wal and -shm read as bytes), and nobody else can read it.

One Alertmanager alert and one signed PagerDuty event carry the secrets; after the runs, every
file under the state directory is searched byte for byte and its mode checked.
"""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from runbook.webhook import pagerduty
from runbook.webhook.settings import WebhookConfig
from tests.hostile.test_f1_atomic_intake import TINY_PLAYBOOK, am_alert, am_group, am_headers
from tests.webhook.helpers import PD_SECRET, playbook, request, serve

PEM_BODY = "MIIEpAIBAAKCAQEA0pemBodyDoNotStoreMe8f3k2Lq9xZ7vW1uT5sR4oP3nM2lK1jH0gF"
# What each secret is planted as, and the part of it that must never be stored.
PLANTED = {
    "bearer": ("curl -H 'Authorization: Bearer s3cr3tBearerTok9f8e7d6c5b4a3' http://vllm:8000", "s3cr3tBearerTok9f8e7d6c5b4a3"),
    "url_password": ("see https://ops:UrlPassw0rdQ42x@wiki.example.com/oom", "UrlPassw0rdQ42x"),
    "hf_token": ("started with HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123 set", "hf_AbCdEfGhIjKlMnOpQrStUvWxYz0123"),
    "json_password": ('{"user": "svc", "password": "JsonPassw0rdZ77q"}', "JsonPassw0rdZ77q"),
    "github": ("pushed with ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa", "ghp_Zx9Yw8Vu7Ts6Rq5Po4Nm3Lk2Ji1Hg0FeDcBa"),
    "aws": ("key AKIAQ3EXAMPLEKEYZ7WQ in the env", "AKIAQ3EXAMPLEKEYZ7WQ"),
    "pem": (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", PEM_BODY),
    "cookie": ("Cookie: session=CookieSess10nValueQ88", "CookieSess10nValueQ88"),
    "dsn": ("db at postgres://app:DsnPassw0rdQ55@db.internal/prod", "DsnPassw0rdQ55"),
    "db_pass": ("env DB_PASS=DbPassValueQ11 was set", "DbPassValueQ11"),
    "pass": ("login pass=PassAbcValueQ22 failed", "PassAbcValueQ22"),
}
DB_PASS_KEY_VALUE = "DbPassKeyValueQ33"  # planted as the value of an annotation named DB_PASS
PD_TITLE_TOKEN = "PdTitleT0kenQ321xyz"


def pd_body(title: str) -> bytes:
    """A PagerDuty V3 incident.triggered event, as the V3 webhook docs show it."""
    data = {"id": "PGR0VU2", "type": "incident", "self": "https://api.pagerduty.com/incidents/PGR0VU2",
            "html_url": "https://acme.pagerduty.com/incidents/PGR0VU2", "number": 2, "status": "triggered",
            "incident_key": "d3640fbd41094207a1c11e58e46b1662", "created_at": "2026-03-14T03:12:07Z",
            "title": title, "service": {"id": "PF9KMXH", "summary": "vLLM serving", "type": "service_reference"},
            "assignees": [], "teams": [], "priority": {"id": "PSO75BM", "summary": "P1"}, "urgency": "high"}
    doc = {"event": {"id": "01DEN1HNLBC1VITK192ETHS2CW", "event_type": "incident.triggered",
                     "resource_type": "incident", "occurred_at": "2026-03-14T03:12:07.000Z", "agent": None,
                     "client": None, "data": data}}
    return json.dumps(doc).encode()


def secrets_found(state: Path) -> dict[str, list[str]]:
    wanted = {name: secret for name, (_, secret) in PLANTED.items()}
    wanted["db_pass_key"] = DB_PASS_KEY_VALUE
    wanted["pd_title"] = PD_TITLE_TOKEN
    found: dict[str, list[str]] = {}
    for path in sorted(p for p in state.rglob("*") if p.is_file()):
        raw = path.read_bytes()
        for name, secret in wanted.items():
            if secret.encode() in raw:
                found.setdefault(name, []).append(str(path.relative_to(state)))
    return found


def not_private(state: Path) -> dict[str, str]:
    """Every directory 0700 and every file 0600, the state directory included; what is not."""
    return {str(p.relative_to(state)) or ".": oct(stat.S_IMODE(p.lstat().st_mode))
            for p in [state, *state.rglob("*")]
            if stat.S_IMODE(p.lstat().st_mode) != (0o700 if p.is_dir() else 0o600)}


@pytest.fixture
def state(tmp_path):
    return tmp_path / "state"


def test_f4_planted_secrets_are_stored_nowhere_and_the_state_is_private(state):
    annotations = {f"hint_{name}": planted for name, (planted, _) in PLANTED.items()}
    annotations["DB_PASS"] = DB_PASS_KEY_VALUE
    alert = am_alert(0, annotations=annotations)
    title = f"OOM on vllm-server: retry with token={PD_TITLE_TOKEN}"
    with serve(state, config=WebhookConfig(workers=1), playbooks=[playbook(TINY_PLAYBOOK)]) as srv:
        reply = request(srv.url, "POST", "/webhooks/alertmanager", am_group([alert]), am_headers())
        assert reply.status == 202, reply.body
        body = pd_body(title)
        signed = {"Content-Type": "application/json", "X-Webhook-Id": "wh-1",
                  pagerduty.SIGNATURE_HEADER: pagerduty.sign(body, PD_SECRET)}
        reply = request(srv.url, "POST", "/webhooks/pagerduty", body, signed)
        assert reply.status == 202, reply.body
        srv.wait_idle(30)
        stored = srv.service.store.incidents()
        assert len(stored) == 2
        # What a run needs from the alert is still there, the secrets are not.
        assert stored[0].alert["labels"]["namespace"] == "llm"
        assert "[REDACTED]" in json.dumps(stored[0].alert)

        sqlite_files = {p.name for p in (state / "webhook").iterdir()}
        assert "state.sqlite3" in sqlite_files and "state.sqlite3-wal" in sqlite_files  # the WAL is searched too
        assert secrets_found(state) == {}
        assert not_private(state) == {}
    assert secrets_found(state) == {}  # after the store is closed (and its WAL checkpointed)
    assert not_private(state) == {}


def test_f4_the_store_is_never_opened_through_a_planted_link_and_an_old_one_is_narrowed(tmp_path):
    from runbook.errors import JournalError
    from runbook.webhook.store import Store

    victim = tmp_path / "victim"
    victim.write_bytes(b"precious")
    planted = tmp_path / "planted" / "state.sqlite3"
    planted.parent.mkdir(mode=0o700)
    planted.symlink_to(victim)
    with pytest.raises(JournalError, match=r"planted/state.sqlite3.*not a link"):
        Store(planted)
    assert victim.read_bytes() == b"precious"

    old = tmp_path / "old" / "state.sqlite3"
    Store(old).close()
    old.chmod(0o644)  # as older versions left it
    Store(old).close()
    assert stat.S_IMODE(old.stat().st_mode) == 0o600

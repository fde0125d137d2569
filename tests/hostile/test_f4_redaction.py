"""Issue 13, finding 4 (the detector): one secret detector, which catches DB_PASS, pass= and the
planted kinds, keeps near misses readable, and is the one the loaders' problem reports use."""

from __future__ import annotations

import json

import pytest
from pydantic import BaseModel, ValidationError

from runbook.files.problems import problems_from_validation_error
from runbook.files.yamlsource import load_yaml
from runbook.record.redaction import REDACTED, looks_secret, redact, redact_text

SECRET = "Zq7xW2pL9kR4tY6u"  # one planted value: wherever it survives, redaction failed


def test_f4_the_three_misses_are_caught():
    assert redact_text(f"DB_PASS={SECRET}") == f"DB_PASS={REDACTED}"
    assert redact_text(f"retrying with pass={SECRET}") == f"retrying with pass={REDACTED}"
    assert redact({"DB_PASS": SECRET, "model": "gemma"}) == {"DB_PASS": REDACTED, "model": "gemma"}


# The kinds the hostile test planted in alert annotations, plus the near relatives of the misses.
PLANTED = [
    "Authorization: Bearer {s}",  # bearer
    "curl https://admin:{s}@grafana.internal/api",  # URL password
    "HF_TOKEN={s}",
    '{{"user": "bob", "password": "{s}"}}',  # JSON password
    "pushed with ghp_{s}{s}abcd",
    "key AKIA{u} used",
    "-----BEGIN RSA PRIVATE KEY-----\n{s}\n-----END RSA PRIVATE KEY-----",  # PEM
    "Cookie: theme=dark; uid={s}",  # every cookie, not only ones named like secrets
    "postgresql://app:{s}@db:5432/prod",  # DSN as a URL
    "DSN=app:{s}@tcp(db:3306)/prod",  # Go's MySQL DSN: no scheme, still a password
    "mysql app:{s}@tcp(db:3306)/prod refused",
    "[FIRING:1] vLLM 401s on gpu-node-3: Bearer {s} rejected",  # a PagerDuty title
    "DB_PASS={s}",
    "SMTP_PASS: {s}",
    "ssh_key: {s}",
    "client-key-data: {s}",  # a kubeconfig's client key
    "X-Amz-Signature={s}&X-Amz-Date=20260314",  # a presigned URL opens the object until it expires
]


@pytest.mark.parametrize("planting", PLANTED)
def test_f4_a_planted_secret_never_survives(planting: str) -> None:
    text = planting.format(s=SECRET, u=SECRET.upper())
    annotations = {"summary": text, "description": f"see: {text}", "runbook_url": "https://wiki/r"}
    for out in (redact_text(text), json.dumps(redact(annotations))):
        assert SECRET not in out and SECRET.upper() not in out, out


@pytest.mark.parametrize("key", ["DB_PASS", "pass", "SMTP_PASS", "db.pass", "ssh_key", "sshKey", "bearer",
                                 "client-key-data", "signing_key", "dsn", "X-Amz-Signature"])
def test_f4_these_keys_name_secrets(key: str) -> None:
    assert looks_secret(key)
    assert redact({key: SECRET}) == {key: REDACTED}


# Decided: `pass` is a secret only as the last word of a key (DB_PASS), never inside another word
# (bypass, compass, passed) nor before one (pass_rate); a policy about a password is not one.
@pytest.mark.parametrize("key", ["passed", "bypass", "compass", "passthrough", "pass_rate", "password_policy",
                                 "client_key_file", "ssh_key_path", "signature_valid"])
def test_f4_near_misses_stay_readable(key: str) -> None:
    assert not looks_secret(key)
    assert redact_text(f"{key}=3") == f"{key}=3"


@pytest.mark.parametrize("text", ["passed=3 failed=0", "bypass=true compass=north", "checks passed: 12/12",
                                  "password_policy: min 12 characters", "one pass over 3 shards"])
def test_f4_ordinary_text_with_pass_is_kept(text: str) -> None:
    assert redact_text(text) == text


def test_f4_a_bare_pass_key_is_read_as_a_password() -> None:
    # `pass: x` is how config files and logs write a password; prose rarely puts a colon there.
    assert redact_text("user: bob pass: 12/12") == f"user: bob pass: {REDACTED}"


# --- one detector: the loaders' problem reports hide a value exactly when redaction would -------


def _reported_value(key: str) -> str:
    model = type("Step", (BaseModel,), {"__annotations__": {key: int}})
    doc = load_yaml(f"{json.dumps(key)}: {SECRET}\n", file="pb.yaml")
    with pytest.raises(ValidationError) as info:
        model.model_validate(doc.data)
    (found,) = problems_from_validation_error(info.value, file="pb.yaml", positions=doc.positions, model=model)
    return found.message


@pytest.mark.parametrize("key", ["DB_PASS", "pass", "ssh_key", "sshKey", "bearer", "private_key", "api-key",
                                 "access_key", "cookie", "credentials", "auth", "client_secret", "password",
                                 "passwd", "token", "HF_TOKEN"])
def test_f4_a_problem_report_never_echoes_a_secret(key: str) -> None:
    message = _reported_value(key)
    assert SECRET not in message and message.endswith("found a value"), message


@pytest.mark.parametrize("key", ["max_tokens", "num_tokens", "token_count", "secret_name", "passed"])
def test_f4_a_problem_report_shows_what_redaction_keeps(key: str) -> None:
    # The loaders' own detector hid these (`token` anywhere in a key); the shared one keeps them,
    # and a wrong max_tokens is worth showing.
    assert SECRET in _reported_value(key)

"""Tests for runbook.record.redaction: planted secrets never survive, ordinary text always does.
Hypothesis properties check survival, idempotence and shape; examples pin each secret form."""

from __future__ import annotations

import collections

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from runbook.record.redaction import REDACTED, looks_secret, redact, redact_text

ALNUM = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
secrets = st.text(ALNUM, min_size=8, max_size=48)

# Log-like words around a planted secret, including the near misses that must not confuse it.
noise_words = st.sampled_from([
    "pod", "vllm-gemma-deployment-7d9f8b6c5-x2x9z", "restarted", "Error:", "OOMKilled", "--port", "8000",
    "--max-model-len=7372", "kv_cache_usage=0.97", "num_tokens=5", "prompt_tokens=12", "KEY_COUNT=3",
    "--verbose", "x=", "name:", "{", "}", "(", ")", ",", ";", "&", "=", ":", "#", "\n",
    "Authorization:", "Bearer", "Basic", "token", "tokens", "password", "https://host:8000/path?q=1",
    'sum(rate(vllm:num_requests_running{model_name="gemma"}[5m]))', "12:30:45", "[REDACTED]",
])
noise = st.lists(noise_words, max_size=8).map(" ".join)
plantings = st.sampled_from([
    "HF_TOKEN={s}", "export HF_TOKEN={s}", "HUGGING_FACE_HUB_TOKEN: {s}", "Bearer {s}", "bearer {s}",
    "Authorization: Bearer {s}", "password: {s}", "password={s}", '"password": "{s}"', "'password': '{s}'",
    "--api-key {s}", "--api-key={s}", "--token {s}", "AWS_SECRET_ACCESS_KEY={s}", "x-api-key: {s}",
    "https://user:{s}@github.com/org/repo", "PAGERDUTY_API_TOKEN={s}", "apiKey={s}", "?access_token={s}&x=1",
])


@given(noise, plantings, secrets, noise)
def test_a_planted_secret_never_survives(before: str, planting: str, secret: str, after: str) -> None:
    # The secret must not also be written elsewhere in the text (in a key, in the noise).
    assume(not any(secret in part for part in (before, after, REDACTED, planting.replace("{s}", " "))))
    text = f"{before} {planting.format(s=secret)} {after}"
    assert secret not in redact_text(text)
    assert secret not in str(redact({"message": text, "lines": [text], "pair": (text, 1)}))


@given(noise, st.lists(st.tuples(plantings, secrets), max_size=3), noise)
def test_redact_text_is_idempotent(before: str, planted: list, after: str) -> None:
    text = " ".join([before, *(p.format(s=s) for p, s in planted), after])
    once = redact_text(text)
    assert redact_text(once) == once


@given(st.text(max_size=200))
def test_redact_text_is_idempotent_on_any_text(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once


@given(st.text(st.sampled_from(list(ALNUM[:26]) + [" ", "=", ":", "-", "_", '"', "'", "\n", "/", "@", "."]), max_size=80))
def test_redact_text_is_idempotent_on_key_value_soup(text: str) -> None:
    once = redact_text(text)
    assert redact_text(once) == once


names = st.from_regex(r"[a-z]{1,8}([_.\-][a-z]{1,8}){0,3}", fullmatch=True).filter(lambda n: not looks_secret(n))
plain = st.text(ALNUM + "._/-", min_size=1, max_size=30).filter(lambda v: not v.startswith("-"))


@given(st.lists(st.tuples(names, plain), min_size=1, max_size=6), st.sampled_from(["=", ": ", "="]))
def test_ordinary_name_value_pairs_survive(pairs: list, sep: str) -> None:
    for _, value in pairs:
        # A value that is itself a well-known token shape is fair game; plain words are not.
        assume(redact_text(value) == value)
    text = " ".join(f"{name}{sep}{value}" for name, value in pairs)
    assert redact_text(text) == text
    assert redact(dict(pairs)) == dict(pairs)


json_like = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=30),
    lambda children: st.lists(children, max_size=4)
    | st.tuples(children, children)
    | st.dictionaries(st.sampled_from(["name", "value", "token", "num_tokens", "password", "HF_TOKEN", "args",
                                       "x-api-key", "model", "pod", "secret_name"]) | st.text(max_size=8),
                      children, max_size=4),
    max_leaves=20,
)


def _shape(value: object) -> object:
    if isinstance(value, dict):
        return ("dict", tuple(value))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, len(value))
    return "leaf"


@given(json_like)
def test_nested_structures_keep_their_shape(value: object) -> None:
    out = redact(value)
    assert _shape(out) == _shape(value)
    if isinstance(value, dict):
        for key in value:
            if _shape(out[key]) != "leaf" and not looks_secret(key):
                assert _shape(out[key]) == _shape(value[key])
    assert redact(out) == out  # idempotent on structures too


@given(json_like)
def test_shape_is_kept_all_the_way_down(value: object) -> None:
    def walk(a: object, b: object) -> None:
        if isinstance(a, dict) and isinstance(b, dict):
            assert list(a) == list(b)
            for key in a:
                if not (isinstance(key, str) and looks_secret(key)):
                    walk(a[key], b[key])
        elif isinstance(a, (list, tuple)):
            assert type(a) is type(b) and len(a) == len(b)
            for x, y in zip(a, b):
                if not (isinstance(y, str) and y == REDACTED):
                    walk(x, y)
        elif not isinstance(a, str) and b != REDACTED:
            assert a == b or (a != a and b != b)

    walk(value, redact(value))


# --- examples ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Authorization: Bearer abc.def", f"Authorization: Bearer {REDACTED}"),
        ('-H "authorization: Basic dXNlcjpwYXNz"', f'-H "authorization: Basic {REDACTED}"'),
        ("got Bearer abcdefgh12345 from the proxy", f"got Bearer {REDACTED} from the proxy"),
        ("Basic dXNlcjpwYXNz", f"Basic {REDACTED}"),
        ("HF_TOKEN=hf_abc", f"HF_TOKEN={REDACTED}"),
        ("export AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCY", f"export AWS_SECRET_ACCESS_KEY={REDACTED}"),
        ("vllm serve m --api-key=sk-abc --port 8000", f"vllm serve m --api-key={REDACTED} --port 8000"),
        ("vllm serve m --api-key sk-abc --port 8000", f"vllm serve m --api-key {REDACTED} --port 8000"),
        ("run --token xyz --verbose", f"run --token {REDACTED} --verbose"),
        ("password=hunter2", f"password={REDACTED}"),
        ("HUGGING_FACE_HUB_TOKEN: hf_abc", f"HUGGING_FACE_HUB_TOKEN: {REDACTED}"),
        ("git clone https://user:pass@github.com/o/r", f"git clone https://user:{REDACTED}@github.com/o/r"),
        ('{"password": "x", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
        ("{'api_key': 'k'}", f"{{'api_key': '{REDACTED}'}}"),
        ("GET /v1/models?access_token=abc&limit=5", f"GET /v1/models?access_token={REDACTED}&limit=5"),
        ("helm --set=db.password=x", f"helm --set=db.password={REDACTED}"),
        ("Cookie: session=abc", f"Cookie: {REDACTED}"),
        ("password=$(cat /run/pw) ok", f"password={REDACTED} ok"),
        ('cut log line password="hunter2', f'cut log line password="{REDACTED}'),
        ("token = HUGGING_FACE_HUB_TOKEN: hf_x", f"token = {REDACTED} {REDACTED}"),
        ("Bearer Bearer abc", f"Bearer {REDACTED} {REDACTED}"),
        ("ghp_" + "a1" * 18, REDACTED),
        ("github_pat_" + "A_1" * 10, REDACTED),
        ("slack xoxb-1234567890-abcdef", f"slack {REDACTED}"),
        ("key AKIAIOSFODNN7EXAMPLE used", f"key {REDACTED} used"),
        ("sk-proj-1234567890abcdefghij", REDACTED),
        ("hf_" + "aBcD" * 8 + "xy", REDACTED),
        ("jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxIn0.c2lnbmF0dXJl", f"jwt {REDACTED}"),
        (
            "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk\n-----END OPENSSH PRIVATE KEY-----\nnext",
            f"-----BEGIN OPENSSH PRIVATE KEY-----{REDACTED}-----END OPENSSH PRIVATE KEY-----\nnext",
        ),
        (  # a truncated key in a log is still a key
            "-----BEGIN PRIVATE KEY-----\nMIIEvQ...",
            f"-----BEGIN PRIVATE KEY-----{REDACTED}",
        ),
    ],
)
def test_secrets_are_caught(text: str, expected: str) -> None:
    assert redact_text(text) == expected
    assert redact_text(expected) == expected


@pytest.mark.parametrize(
    "text",
    [
        "--max-model-len=7372",
        "kv_cache_usage=0.97",
        "KEY_COUNT=3",
        "num_tokens=5 prompt_tokens=12 max_tokens=256 token_count=4",
        "vllm-gemma-deployment-7d9f8b6c5-x2x9z",
        'histogram_quantile(0.99, sum(rate(vllm:e2e_request_latency_seconds_bucket{model_name="g"}[5m])) by (le))',
        "sum(vllm:gpu_cache_usage_perc) > 0.9",
        "Error: password incorrect for user bob",
        "missing Bearer token",
        "Basic troubleshooting done",
        "tokenizer_mode=auto --tokenizer=google/gemma",
        "secretKeyRef: hf-secret",
        "env HF_TOKEN=$(HF_TOKEN) ${API_KEY}",
        "hf_hub_download hf_transfer",
        "http://10.0.0.1:8000/metrics at 12:30:45",
        "",
    ],
)
def test_ordinary_text_is_kept(text: str) -> None:
    assert redact_text(text) == text


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("token", True), ("HF_TOKEN", True), ("PAGERDUTY_API_TOKEN", True), ("x-api-key", True),
        ("apiKey", True), ("APIKey", True), ("api_key", True), ("apikey", True), ("Authorization", True),
        ("Set-Cookie", True), ("AWS_SECRET_ACCESS_KEY", True), ("private_key", True), ("client_secret", True),
        ("session_id", True), ("DB_PASSWORD", True), ("pwd", True), ("credentials", True), ("hftoken", True),
        ("--token", True), ("auth", True),
        ("num_tokens", False), ("prompt_tokens", False), ("tokens", False), ("tokenizer", False),
        ("token_count", False), ("max-model-len", False), ("author", False), ("secret_name", False),
        ("secretKeyRef", False), ("KEY_COUNT", False), ("keys", False), ("", False),
    ],
)
def test_looks_secret(key: str, secret: bool) -> None:
    assert looks_secret(key) is secret


def test_redact_structures() -> None:
    Pair = collections.namedtuple("Pair", "key value")
    data = {
        "PAGERDUTY_API_TOKEN": "abc",
        "x-api-key": {"nested": "whole value goes"},
        "password": None,
        "auth": True,
        "pin_password": 123456,
        "num_tokens": 5,
        "model": "google/gemma-3-27b-it",
        "log": "HF_TOKEN=hf_abc started",
        "argv": ["vllm", "serve", "--api-key", "sk-abc", "--port", "8000"],
        "argv_tuple": ("--token", "xyz", "--token", "--verbose"),
        "header": ("X-Api-Key", "abc"),
        "namedtuple": Pair("password", "hunter2"),
        "env": [{"name": "HF_TOKEN", "value": "hf_x"}, {"name": "MODEL_ID", "value": "g"}],
        "tags": {"a", "password=x"},
        "raw": b"bytes stay",
        1: "non-str keys are fine",
    }
    out = redact(data)
    assert out == {
        "PAGERDUTY_API_TOKEN": REDACTED,
        "x-api-key": REDACTED,
        "password": None,
        "auth": True,
        "pin_password": REDACTED,
        "num_tokens": 5,
        "model": "google/gemma-3-27b-it",
        "log": f"HF_TOKEN={REDACTED} started",
        "argv": ["vllm", "serve", "--api-key", REDACTED, "--port", "8000"],
        "argv_tuple": ("--token", REDACTED, "--token", "--verbose"),
        "header": ("X-Api-Key", REDACTED),
        "namedtuple": Pair("password", REDACTED),
        "env": [{"name": "HF_TOKEN", "value": REDACTED}, {"name": "MODEL_ID", "value": "g"}],
        "tags": {"a", f"password={REDACTED}"},
        "raw": b"bytes stay",
        1: "non-str keys are fine",
    }
    assert type(out["namedtuple"]) is Pair
    assert redact(out) == out
    assert data["PAGERDUTY_API_TOKEN"] == "abc"  # the input is not modified


def test_other_values_unchanged() -> None:
    marker = object()
    assert redact(marker) is marker
    assert redact(3.5) == 3.5
    assert redact(None) is None


def test_series_points_hold_only_times_and_numbers_and_pass_through_whole():
    """The run's end journals thousands of chart points: checked once when built, never walked."""
    from runbook.record.redaction import SeriesPoints

    points = SeriesPoints([("2026-05-04T03:12:07.000Z", 1.5), ["2026-05-04T03:12:37.000Z", 2]])
    assert redact({"series": [{"points": points}]})["series"][0]["points"] is points
    assert points == [["2026-05-04T03:12:07.000Z", 1.5], ["2026-05-04T03:12:37.000Z", 2]]
    for bad in [("Bearer abcdefghijklmnop", 1.0), ("2026-05-04T03:12:07.000Z", "hf_abcdefghijklmnopqrstu"),
                ("2026-05-04T03:12:07.000Z", float("nan")), ("2026-05-04T03:12:07.000Z", float("inf")),
                ("2026-05-04T03:12:07.000Z", True)]:
        with pytest.raises(ValueError):
            SeriesPoints([bad])


def test_series_points_check_every_time_even_when_the_grid_is_remembered():
    from runbook.record import redaction
    from runbook.record.redaction import SeriesPoints

    good = "2026-05-04T03:12:07.000Z"
    SeriesPoints([(good, 1.0)])  # remembered as checked
    assert good in redaction._CHECKED_TIMES
    for bad in [(good + " ", 1.0), (good[:-1], 1.0), (good, float("-inf")), (good, None), (good, "1.0"),
                (b"2026-05-04T03:12:07.000Z", 1.0)]:
        with pytest.raises(ValueError):
            SeriesPoints([(good, 2.0), bad])
    redaction._CHECKED_TIMES.clear()  # a full cache is emptied, never trusted blindly
    assert SeriesPoints([(good, 3)]) == [[good, 3]]


def test_series_points_reach_the_journal_file_as_plain_pairs(tmp_path):
    import json

    from runbook.record.journal import JsonlJournal
    from runbook.record.redaction import SeriesPoints
    import datetime as dt

    journal = JsonlJournal(tmp_path / "i" / "journal.jsonl", incident="i", run="r")
    journal.record("evidence", at=dt.datetime(2026, 5, 4, tzinfo=dt.timezone.utc),
                   data={"series": [{"labels": {"pod": "p"}, "points": SeriesPoints([("2026-05-04T00:00:00.000Z", 3.0)])}]})
    line = json.loads((tmp_path / "i" / "journal.jsonl").read_text().splitlines()[-1])
    assert line["data"]["series"][0]["points"] == [["2026-05-04T00:00:00.000Z", 3.0]]

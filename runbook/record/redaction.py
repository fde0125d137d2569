"""Secrets never reach the journal: scrub tokens, passwords and keys from text and structures.
`redact` walks dicts, lists and tuples by key; `redact_text` masks what free text gives away."""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["REDACTED", "SeriesPoints", "looks_secret", "redact", "redact_text"]

REDACTED = "[REDACTED]"

# A key is read as segments (HF_TOKEN, x-api-key, apiKey -> hf/token, x/api/key, api/key) and a
# secret word must be a whole segment, so `num_tokens`, `prompt_tokens` and `tokenizer` are not.
_SECRET_SEGMENTS = frozenset({
    "token", "secret", "secrets", "password", "passwords", "passwd", "pwd", "passphrase",
    "apikey", "apikeys", "authorization", "auth", "credential", "credentials",
    "privatekey", "accesskey", "sshkey", "cookie", "cookies", "session", "sessionid", "bearer",
    # A DSN carries its password inline (app:pw@tcp(db)/x); a presigned URL's signature opens it.
    "dsn", "signature",
})
_SECRET_PAIRS = frozenset({
    ("api", "key"), ("api", "keys"), ("private", "key"), ("private", "keys"),
    ("access", "key"), ("access", "keys"), ("ssh", "key"), ("ssh", "keys"),
    ("client", "key"), ("signing", "key"), ("encryption", "key"),
})
# Short for password only at the end of a key (DB_PASS, SMTP_PASS, pass): before another word
# (pass_rate, pass_through) or inside one (bypass, compass, passed) it means something else.
_SECRET_LAST_SEGMENTS = frozenset({"pass"})
# Glued words still give themselves away by their ending: hftoken, dbpassword, mysqlpasswd.
_SECRET_SUFFIXES = ("token", "password", "passwd", "secret", "apikey")
# A trailing qualifier makes the key about the secret, not the secret itself: token_count,
# secret_name, password_file, auth_type, session_timeout.
_QUALIFIERS = frozenset({
    "count", "counts", "num", "number", "len", "length", "size", "limit", "limits", "max", "min",
    "total", "usage", "budget", "type", "kind", "ref", "name", "names", "file", "path", "dir",
    "url", "uri", "endpoint", "ttl", "timeout", "expiry", "expires", "enabled", "required", "mode",
    "policy", "valid", "invalid", "verified",
})


def _segments(key: str) -> list[str]:
    key = re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", key)  # apiKey -> api_Key
    key = re.sub(r"([A-Z]+)([A-Z][a-z])", r"\1_\2", key)  # APIKey -> API_Key
    return [s for s in re.split(r"[^a-z0-9]+", key.lower()) if s]


@functools.lru_cache(maxsize=4096)  # pure; the same few keys recur in every event
def looks_secret(key: str) -> bool:
    """Whether a key, variable or flag name (PAGERDUTY_API_TOKEN, x-api-key, --token) names a secret."""
    segments = _segments(key)
    if not segments or segments[-1] in _QUALIFIERS:
        return False
    if segments[-1] in _SECRET_LAST_SEGMENTS:
        return True
    if any(s in _SECRET_SEGMENTS or s.endswith(_SECRET_SUFFIXES) for s in segments):
        return True
    return any(pair in _SECRET_PAIRS for pair in zip(segments, segments[1:]))


# --- text ----------------------------------------------------------------------------------------

_PEM = re.compile(
    r"-----BEGIN ((?:[A-Z0-9]+ )*)PRIVATE KEY-----(?P<body>.*?)(?:-----END \1PRIVATE KEY-----|\Z)", re.S
)
# The whole credential after an Authorization header, whatever its scheme; the scheme stays
# readable because "which kind of auth was sent" is useful in an incident.
_AUTH_HEADER = re.compile(
    r"""(?ix)
    \b((?:proxy-)?authorization["']?[ \t]*[:=][ \t]*["']?)
    ((?:bearer|basic|digest|token|negotiate|ntlm|apikey|aws4-hmac-sha256)[ \t]+)?
    ([^\s"',;]+)
    """
)
# "Bearer <token>" anywhere; a few short words that follow it in prose stay (all under 8 letters).
# The credential is the whole run of non-blanks, not just RFC 6750 characters, so a stray
# `Bearer HF_TOKEN=x` cannot stop the match at "=" and leave x behind.
_BEARER = re.compile(
    r"(?i)\b(bearer[ \t]+)(?!(?:token|tokens|auth|scheme|header)(?![^\s\"',;]))([^\s\"',;]+)"
)
_BASIC = re.compile(r"(?i)\b(basic[ \t]+)([A-Za-z0-9+/]{8,}={0,2})(?=[\s\"',;]|\Z)")
# Bounded userinfo keeps the scan linear on long runs of "a:" with no "@" in sight.
_URL_CREDENTIALS = re.compile(r"\b([A-Za-z][A-Za-z0-9+.\-]{0,31}://)([^\s/:@]{0,256}):([^\s/@]{1,256})@")
# Go's MySQL DSN has no scheme: user:password@tcp(host:3306)/db, or @unix(/path).
_GO_DSN = re.compile(r"(?<![\w.\-])([\w.\-]{0,64}):([^\s/:@]{1,256})@(?:tcp|tcp6|udp|unix)\(")
# KEY=value, export KEY=value, KEY: value, "KEY": "value", --key=value and, for dashed flags
# only, `--key value`; a value never spans lines. Whether KEY is secret is decided in code,
# and only then is the value read (_VALUE), so a run of "a=a=a=..." stays linear.
_KEY_SEP = re.compile(
    r"""(?x)
    (?<![\w.\-])
    (?P<key>(?P<dash>--?)?[A-Za-z_][\w.\-]*)
    (?:
        ["']?[ \t]*[:=][ \t]*
      | (?(dash)[ \t]+(?=[^\s\-])|(?!))
    )
    (?=\S)
    """
)
_VALUE = re.compile(
    r"""(?x)
        "(?:[^"\\\n]|\\.)*"
      | '[^'\n]*'
      | \$\([A-Za-z_]\w*\) | \$\{[A-Za-z_]\w*\}
      | \$\([^)\n]*\)? | \$\{[^}\n]*\}?
      | ["'][^"'\n]*
      | \[REDACTED\]
      | [^\s"',;&)}]+
    """
)
# An unquoted Cookie header runs on through `; name=value` pairs (Set-Cookie attributes too).
_COOKIE_VALUE = re.compile(r"[^\s\"',;]+(?:;[ \t]*[^\s\"',;]+)*")
# Shapes that are secrets wherever they appear, whatever the key (or none) in front of them.
_TOKEN_SHAPES = re.compile(
    r"""(?x)
    (?<![A-Za-z0-9_])
    (?:
        gh[pousr]_[A-Za-z0-9]{20,}
      | github_pat_[A-Za-z0-9_]{20,}
      | xox[bpoasr]-[A-Za-z0-9\-]{10,}
      | (?:AKIA|ASIA)[0-9A-Z]{16}
      | sk-[A-Za-z0-9_\-]{17,}
      | hf_[A-Za-z0-9]{16,}
      | AIza[0-9A-Za-z_\-]{35}
      | eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*
    )
    (?![A-Za-z0-9])
    """
)


_REFERENCE = re.compile(r"\$\([A-Za-z_]\w*\)|\$\{[A-Za-z_]\w*\}")


def _looks_base64(text: str) -> bool:
    # "Basic <b64>" but not "Basic troubleshooting": base64 of user:pass has digits, +, /, = or
    # capitals inside the word, which English after "Basic" rarely does.
    return bool(re.search(r"[0-9+/=]", text) or (re.search(r".[A-Z]", text) and re.search(r"[a-z]", text)))


Span = tuple[int, int]


def _key_value_spans(text: str) -> list[Span]:
    # A manual scan, not finditer: when a key is not secret we resume right after the key, so a
    # secret inside its value (`--set=db.password=x`, `url=...?token=x`) is still found.
    spans: list[Span] = []
    pos = 0
    while (m := _KEY_SEP.search(text, pos)) is not None:
        key = m["key"]
        pos = m.end("key")
        if not looks_secret(key) or _segments(key)[-1] == "authorization":  # the header rule's
            continue
        v = _VALUE.match(text, m.end())
        if v is None:
            continue
        if _segments(key)[-1] in ("cookie", "cookies") and v[0][0] not in "\"'":
            # Every cookie of the header is a credential, not only those named like one.
            v = _COOKIE_VALUE.match(text, m.end()) or v
        value = v[0]
        # References like $(HF_TOKEN) name a secret without holding one.
        if _REFERENCE.fullmatch(value) or value in ('""', "''"):
            continue
        # Quotes stay (the text still parses); an unterminated one (a cut log line) keeps its opening.
        opening = value[0] in "\"'"
        closing = opening and len(value) > 1 and value[-1] == value[0]
        spans.append((v.start() + opening, v.end() - closing))
        # The value may end in a key of its own (`token = HF_TOKEN: x`), whose value lies beyond
        # this one: look again at the end of the value, not only after it.
        pos = max(pos, v.end() - _KEY_REACH)
    return spans


_KEY_REACH = 256  # longer than any key and separator we expect to see


def _overlapping(pattern: re.Pattern[str], text: str, group: int) -> Iterator[re.Match[str]]:
    # Matches may overlap: in "Bearer Bearer x" the first credential is the second "Bearer",
    # and the second match must still be seen to catch x. Only a trigger near the end of a
    # credential can reach past it (one further in has its credential inside this one), so
    # the search resumes a short way back from the end, which keeps it linear.
    pos = 0
    while (m := pattern.search(text, pos)) is not None:
        yield m
        pos = max(m.start() + 1, m.start(group), m.end(group) - _TRIGGER_REACH)


_TRIGGER_REACH = 64  # longer than any trigger: `proxy-authorization": `, `bearer\t`


def _secret_spans(text: str) -> list[Span]:
    # Every rule reads the original text and only reports where secrets are; masking happens
    # once, afterwards, so no rule can hide from another the key or header it needs to see.
    spans: list[Span] = [m.span("body") for m in _PEM.finditer(text)]
    spans += [m.span(2) for m in _overlapping(_BEARER, text, 2)]
    spans += [m.span(2) for m in _overlapping(_BASIC, text, 2) if _looks_base64(m[2])]
    spans += [m.span(3) for m in _overlapping(_URL_CREDENTIALS, text, 3)]
    spans += [m.span(2) for m in _GO_DSN.finditer(text)]
    spans += _key_value_spans(text)
    spans += [m.span(3) for m in _overlapping(_AUTH_HEADER, text, 3)]
    spans += [m.span() for m in _TOKEN_SHAPES.finditer(text)]
    return [span for span in spans if span[0] < span[1]]


def redact_text(text: str) -> str:
    """`text` with every secret it shows replaced by REDACTED; idempotent."""
    if len(text) <= 512:
        return _redact_short(text)  # short texts (labels, names, summaries) repeat: remember them
    return _redact_text(text)


@functools.lru_cache(maxsize=16384)
def _redact_short(text: str) -> str:
    return _redact_text(text)


def _redact_text(text: str) -> str:
    # A mask changes the character before what follows it ("x--token y" becomes
    # "[REDACTED]--token y", where --token now starts a key), so repeat until nothing changes:
    # that is what makes redact(redact(x)) == redact(x). Two passes are the usual case.
    for _ in range(_MAX_PASSES):
        masked = _mask_once(text)
        if masked == text:
            break
        text = masked
    return text


_MAX_PASSES = 8


def _mask_once(text: str) -> str:
    if not text:
        return text
    parts: list[str] = []
    done = -1
    for start, end in sorted(_secret_spans(text)):
        if start <= done:  # overlapping or touching spans become one REDACTED
            done = max(done, end)
            continue
        if done >= 0:
            parts.append(REDACTED)
        parts.append(text[max(done, 0) : start])
        done = end
    if done < 0:
        return text
    parts.append(REDACTED)
    parts.append(text[done:])
    return "".join(parts)


# --- structures ----------------------------------------------------------------------------------


def _mask(value: Any) -> Any:
    # Nothing to hide in an absent or empty value, or a flag; showing it helps the diagnosis.
    if value is None or value == "" or isinstance(value, bool):
        return value
    return REDACTED


def _secret_flag(item: object) -> bool:
    return (
        isinstance(item, str)
        and item.startswith("-")
        and "=" not in item
        and not any(c.isspace() for c in item)
        and looks_secret(item)
    )


def _redact_mapping(value: Mapping[Any, Any]) -> dict[Any, Any]:
    # A Kubernetes env entry hides its secret under "value": {"name": "HF_TOKEN", "value": "hf_..."}.
    name = value.get("name")
    named_secret = isinstance(name, str) and looks_secret(name)
    out: dict[Any, Any] = {}
    for key, item in value.items():
        if (isinstance(key, str) and looks_secret(key)) or (named_secret and key == "value"):
            out[key] = _mask(item)
        else:
            out[key] = redact(item)
    return out


def _redact_sequence(value: list[Any] | tuple[Any, ...]) -> list[Any] | tuple[Any, ...]:
    items = list(value)
    out: list[Any] = []
    # A secret flag's value is the next element of an argv: ["--api-key", "sk-..."]; and a
    # pair like ("X-Api-Key", "abc") is a header.
    pair = len(items) == 2 and isinstance(items[0], str) and looks_secret(items[0])
    mask_next = False
    for i, item in enumerate(items):
        if (mask_next and not (isinstance(item, str) and item.startswith("-"))) or (pair and i == 1):
            out.append(_mask(item))
        else:
            out.append(redact(item))
        mask_next = _secret_flag(item)
    if isinstance(value, list):
        return out if type(value) is list else _rebuild(value, out)
    if type(value) is tuple:
        return tuple(out)
    if hasattr(value, "_fields"):  # a namedtuple takes its fields positionally
        return type(value)(*out)
    return _rebuild(value, out)


def _rebuild(value: Any, items: Any) -> Any:
    try:
        return type(value)(items)
    except TypeError:
        return items


class SeriesPoints(list):
    """A metric series' `[time, value]` pairs, checked when built to hold only journal timestamps
    and finite numbers, so nothing in them can be a secret: `redact` passes them through whole
    (a run's end journals thousands of points; walking each for secrets was most of its cost)."""

    def __init__(self, points: Any = ()):
        pairs = []
        checked = _CHECKED_TIMES
        for at, value in points:
            if type(at) is not str or (at not in checked and not _journal_time(at)):
                raise ValueError(f"a series point's time must be a journal timestamp, not {at!r}")
            if (type(value) is not float and type(value) is not int) or not math.isfinite(value):
                raise ValueError(f"a series point's value must be a finite number, not {value!r}")
            pairs.append([at, value])
        super().__init__(pairs)


def _journal_time(text: str) -> bool:
    """Whether `text` is a journal timestamp; one that is is remembered (a run's series share one grid)."""
    if not _JOURNAL_TIME.fullmatch(text):
        return False
    if len(_CHECKED_TIMES) >= _CHECKED_KEPT:
        _CHECKED_TIMES.clear()
    _CHECKED_TIMES.add(text)
    return True


_CHECKED_KEPT = 65536
_CHECKED_TIMES: set[str] = set()
_JOURNAL_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z")


def redact(value: Any) -> Any:
    """`value` with secrets replaced: dicts by key (keys kept), lists/tuples/sets item by item
    (same type back), strings through `redact_text`; anything else is returned unchanged."""
    if type(value) is SeriesPoints:
        return value
    if isinstance(value, str):
        return redact_text(value)
    if isinstance(value, Mapping):
        out = _redact_mapping(value)
        return out if type(value) is dict or not isinstance(value, dict) else _rebuild(value, out)
    if isinstance(value, (list, tuple)):
        return _redact_sequence(value)
    if isinstance(value, (set, frozenset)):
        return type(value)(redact(item) for item in value)
    return value

"""Values that come from outside (alert labels mapped into params, `-p` params) screened before use.

They are data: names, never templates, selectors to widen or commands. One screen for `runbook run`
and the webhook. Alert labels follow Kubernetes label-value syntax (letters, digits, '-', '_', '.';
at most 63; a letter or digit at each end). `-p` values may also join such names with '/', '=',
',' or ':' and start with '/' (`statefulset/vllm-server`, `app=vllm-server,tier=gpu`, `/health`;
at most 253 characters); a regular expression or text with spaces belongs in the playbook.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from runbook.errors import InvalidInput
from runbook.files.problems import did_you_mean

LABEL_VALUE = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.-]{0,61}[A-Za-z0-9])?")
PARAM_VALUE = re.compile(r"(?=.{1,253}\Z)/?[A-Za-z0-9_.-]+(?:[/=,:][A-Za-z0-9_.-]+)*")
LABEL_RULE = "letters, digits, '-', '_', '.'; at most 63, a letter or digit at each end"
PARAM_RULE = "names of letters, digits, '-', '_', '.', joined by '/', '=', ',' or ':'; at most 253"


def shown(value: str) -> str:
    """The value as it can be printed safely: control characters escaped (once), quoted, cut at 80 characters.

    A backslash that was typed stays one backslash: the text is shown as given, never as a Python repr.
    """
    escaped = "".join(c if c.isprintable() else c.encode("unicode_escape").decode("ascii") for c in value[:80])
    return f"'{escaped}'" + ("…" if len(value) > 80 else "")


def is_label_value(value: str) -> bool:
    return LABEL_VALUE.fullmatch(value) is not None


def screen_label(label: str, value: str, *, param: str) -> str:
    """`value` of alert label `label` (becoming param `param`), or InvalidInput naming both."""
    if not isinstance(value, str) or not is_label_value(value):
        raise InvalidInput(f"alert label {label}={shown(str(value))} is not a safe value for param {param} "
                           f"({LABEL_RULE}); alert values are data, never templates or commands")
    return value


def screen_param(name: str, value: str, *, option: str = "--param") -> str:
    if PARAM_VALUE.fullmatch(value) is None:
        raise InvalidInput(f"{option} {name}={shown(value)} is not a safe value ({PARAM_RULE}); a value is data, "
                           "never a template or a command: put anything else in the playbook")
    return value


def screen_option(option: str, value: str) -> str:
    """A name given by an option such as --namespace: the label-value rule."""
    if not is_label_value(value):
        raise InvalidInput(f"{option} {shown(value)} is not a safe value ({LABEL_RULE})")
    return value


def params_from_labels(mapping: Mapping[str, str], labels: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """(params, where each came from) for the playbook's `match.labels` (param → label), each value screened."""
    params: dict[str, str] = {}
    sources: dict[str, str] = {}
    for param, label in mapping.items():
        if label in labels:
            params[param] = screen_label(label, labels[label], param=param)
            sources[param] = f"alert label {label}"
    return params, sources


def check_known_params(playbook: str, declared: Mapping[str, object], sources: Mapping[str, str]) -> None:
    """InvalidInput naming every given param the playbook does not declare: a typo is never ignored.

    `sources`: param → where it came from (`--param nmespace`), as `gather_params` records it.
    """
    unknown = [name for name in sources if name not in declared]
    if not unknown:
        return
    lines = []
    for name in unknown:
        hint = did_you_mean(name, sorted(declared))
        if hint.startswith("expected one of: "):
            hint = "its params: " + hint[len("expected one of: "):]
        lines.append(f"playbook {playbook} has no param {name} (from {sources[name]}); {hint or 'it takes none'}")
    raise InvalidInput("\n".join(lines))

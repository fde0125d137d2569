"""The config file: one YAML document whose top-level sections belong to the backends.

Found at `--config`, else `$RUNBOOK_CONFIG`, else `./runbook.yaml`, else
`$XDG_CONFIG_HOME/runbook/config.yaml` (`~/.config/runbook/config.yaml`); a path given
explicitly must exist. Each owner validates its own section with `section_model`, so every
problem is reported as `file:line:col` like a playbook's. `kubernetes.namespaces` (where runbook
may act) is read here, not by the backend, and is not part of the section the backend sees.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import pydantic

from runbook.errors import InvalidInput
from runbook.files.discovery import find_config

SECTIONS = ("prometheus", "signals", "kubernetes", "nodes", "webhook")
# Sections that earlier versions accepted and never read: refused, saying where the setting lives.
RETIRED = {"safety": "guards are set per step in the playbook (`guard:`), and the kill switch by RUNBOOK_KILL_SWITCH",
           "playbooks": "pass playbook folders as arguments (`runbook list DIR`, `runbook serve --playbooks DIR`)"}

Model = TypeVar("Model", bound=pydantic.BaseModel)
NAMESPACE_NAME = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"


class NamespacesSetting(pydantic.BaseModel):
    """`kubernetes.namespaces`: the only namespaces a run may act in (default: the playbook's own)."""

    model_config = pydantic.ConfigDict(extra="forbid")

    namespaces: list[pydantic.constr(pattern=NAMESPACE_NAME)] | None = pydantic.Field(None, min_length=1)  # type: ignore[valid-type]


@dataclasses.dataclass(frozen=True)
class Config:
    path: Path | None
    sections: Mapping[str, Any]
    positions: Any = None  # loading.yamlsource.Positions of the file, for error locations
    # `kubernetes.namespaces` as written, taken out of `sections` so the backend's strict model never sees it
    namespaces_setting: Any = None

    def __post_init__(self) -> None:
        kubernetes = self.sections.get("kubernetes")
        if isinstance(kubernetes, Mapping) and "namespaces" in kubernetes:
            rest = {k: v for k, v in kubernetes.items() if k != "namespaces"}
            sections = {k: v for k, v in self.sections.items() if k != "kubernetes"}
            if rest:  # the allow-list alone does not mean "connect to a cluster"
                sections["kubernetes"] = rest
            object.__setattr__(self, "namespaces_setting", kubernetes["namespaces"])
            object.__setattr__(self, "sections", sections)

    def namespaces(self) -> tuple[str, ...] | None:
        """The configured namespace allow-list, or None (each playbook's own `namespace` param)."""
        if self.namespaces_setting is None:
            return None
        try:
            setting = NamespacesSetting.model_validate({"namespaces": self.namespaces_setting})
        except pydantic.ValidationError as exc:
            self._raise_located(exc, "kubernetes", NamespacesSetting)
        return tuple(setting.namespaces or ())

    def section(self, name: str) -> dict[str, Any]:
        if name not in SECTIONS:
            raise ValueError(f"unknown config section {name!r}")
        value = self.sections.get(name) or {}
        return dict(value)

    def section_model(self, name: str, model: type[Model]) -> Model:
        """The section validated against `model`; problems raise InvalidInput located in the file."""
        try:
            return model.model_validate(self.section(name))
        except pydantic.ValidationError as exc:
            self._raise_located(exc, name, model)

    def _raise_located(self, exc: pydantic.ValidationError, name: str, model: type[pydantic.BaseModel]) -> NoReturn:
        from runbook.files.problems import problems_from_validation_error

        file = str(self.path) if self.path else "<no config file>"
        problems = problems_from_validation_error(exc, file=file, positions=self.positions,
                                                  base_path=(name,), model=model)
        raise InvalidInput(f"the config file is invalid ({len(problems)} problem(s)):\n"
                           + "\n".join(p.format() for p in problems)) from None


EMPTY = Config(None, {})


def load_config(explicit: str | Path | None = None, env: Mapping[str, str] | None = None) -> Config:
    path = find_config(explicit, env)
    if path is None:
        return EMPTY
    from runbook.files.problems import did_you_mean, problem
    from runbook.files.yamlsource import load_yaml, read_yaml_text

    try:
        text = read_yaml_text(path)
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidInput(f"cannot read the config file {path}: {exc}") from None
    doc = load_yaml(text, file=str(path), kind="config file")
    problems = list(doc.problems)
    data = doc.data if doc.data is not None else {}
    if doc.data is not None and not isinstance(data, Mapping):
        raise InvalidInput(f"{path}: the config file must be a mapping of sections ({', '.join(SECTIONS)})")
    for key in data:
        if key not in SECTIONS:
            hint = (f"remove it: runbook never read it; {RETIRED[key]}" if key in RETIRED
                    else did_you_mean(str(key), SECTIONS))
            problems.append(problem("unknown-key", file=str(path), position=doc.positions.key((key,)), path=str(key),
                                    message=f"unknown config section `{key}`", hint=hint))
    if problems:
        raise InvalidInput(f"the config file is invalid ({len(problems)} problem(s)):\n"
                           + "\n".join(p.format() for p in sorted(problems)))
    config = Config(path, dict(data), doc.positions)
    config.namespaces()  # a bad allow-list is reported now, located, not at the first run
    return config

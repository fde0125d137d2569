"""The workloads of a manifest file (multi-document YAML, `kind: List` too) or of a live object.
Each comes out as the pod template `advise` reads: containers, nodeSelector, affinity, and where it was."""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from runbook.errors import InvalidInput
from runbook.files.positions import PathTuple, Positions

WORKLOAD_KINDS = ("Deployment", "StatefulSet", "DaemonSet", "Pod")
_DOCUMENT_START = re.compile(r"^---(?=\s|$)")
_DOCUMENT_END = re.compile(r"^\.\.\.\s*$")


@dataclasses.dataclass(frozen=True)
class WorkloadSpec:
    kind: str  # as the manifest writes it: Deployment, StatefulSet, …
    name: str
    namespace: str
    pod_spec: Mapping[str, Any]
    where: str  # "deploy.yaml:16 (document 1)" or "statefulset/vllm-server in llm (live)"
    file: str = ""  # the manifest, for file:line:col; "" for a live workload
    positions: Positions | None = None  # where each value of the document was written
    pod_path: PathTuple = ()  # the pod spec's path in the document: ("spec", "template", "spec")

    @property
    def ref(self) -> str:
        return f"{self.kind.lower()}/{self.name}"

    def location(self, *path: str | int) -> str:
        """`file:line:col` of a value under the pod spec (or its nearest written ancestor); "" when live."""
        if self.positions is None:
            return ""
        _, position = self.positions.nearest((*self.pod_path, *path))
        return f"{self.file}:{position.line}:{position.column}" if position else self.file


def _documents(text: str) -> Iterator[tuple[int, str]]:
    """(first line, text) of each YAML document: split at `---` lines, so each is read on its own."""
    first, lines = 1, []
    for number, line in enumerate(text.splitlines(keepends=True), start=1):
        if _DOCUMENT_START.match(line) or _DOCUMENT_END.match(line):
            yield first, "".join(lines)
            rest = line[3:] if line.startswith("---") else ""
            # The next document starts on this line when `--- ` carries content, else on the next one.
            first, lines = (number, [" " * 3 + rest]) if rest.strip() else (number + 1, [])
            continue
        lines.append(line)
    yield first, "".join(lines)


def read_manifest(path: str | os.PathLike[str]) -> list[WorkloadSpec]:
    """Every Deployment, StatefulSet, DaemonSet and Pod of the file, in order; other kinds are passed over."""
    from runbook.files.yamlsource import load_yaml, read_yaml_text

    label = os.fspath(path)
    try:
        text = read_yaml_text(path)
    except OSError as exc:
        raise InvalidInput(f"cannot read {label}: {exc.strerror or exc}; give the manifest's path with -f") from None
    except UnicodeDecodeError:
        raise InvalidInput(f"cannot read {label}: it is not UTF-8 text; give a YAML manifest with -f") from None
    found: list[WorkloadSpec] = []
    count = 0
    for first, piece in _documents(text):
        if not piece.strip() or all(not ln.strip() or ln.lstrip().startswith("#") for ln in piece.splitlines()):
            continue
        count += 1
        # Lines are counted from the document's start: the loader sees it alone, so shift by where it begins.
        loaded = load_yaml("\n" * (first - 1) + piece, file=label, kind="manifest")
        if loaded.problems:
            raise InvalidInput("; ".join(p.format(code=False) for p in loaded.problems))
        start = first + next((i for i, ln in enumerate(piece.splitlines())
                              if ln.strip() and not ln.lstrip().startswith("#")), 0)
        found.extend(dataclasses.replace(spec, file=label, positions=loaded.positions)
                     for spec in workloads_in(loaded.data, f"{label}:{start} (document {count})"))
    return found


def workloads_in(doc: Any, where: str, path: PathTuple = ()) -> list[WorkloadSpec]:
    if not isinstance(doc, Mapping):
        return []
    if doc.get("kind") == "List" or str(doc.get("kind", "")).endswith("List"):
        return [w for i, item in enumerate(doc.get("items") or [])
                for w in workloads_in(item, f"{where} items[{i}]", (*path, "items", i))]
    kind = doc.get("kind")
    if kind not in WORKLOAD_KINDS:
        return []
    meta = doc.get("metadata") if isinstance(doc.get("metadata"), Mapping) else {}
    name = str(meta.get("name") or "")
    if kind == "Pod":
        pod_spec = doc.get("spec")
    else:
        pod_spec = ((doc.get("spec") or {}).get("template") or {}).get("spec")
    if not isinstance(pod_spec, Mapping):
        field = "spec" if kind == "Pod" else "spec.template.spec"
        raise InvalidInput(f"{where}: {kind}/{name} has no {field}; a workload needs a pod template with containers")
    pod_path = (*path, "spec") if kind == "Pod" else (*path, "spec", "template", "spec")
    return [WorkloadSpec(kind, name, str(meta.get("namespace") or ""), pod_spec, where, pod_path=pod_path)]


def required_node_labels(pod_spec: Mapping[str, Any]) -> dict[str, str]:
    """Labels every node the pods may run on carries: the nodeSelector, and required affinity terms
    that pin one key to one value (in every term, since any term may be the one that matches)."""
    labels = {str(k): str(v) for k, v in (pod_spec.get("nodeSelector") or {}).items()}
    required = ((((pod_spec.get("affinity") or {}).get("nodeAffinity") or {})
                 .get("requiredDuringSchedulingIgnoredDuringExecution") or {}).get("nodeSelectorTerms") or [])
    pinned: list[dict[str, str]] = []
    for term in required:
        one: dict[str, str] = {}
        for expr in (term or {}).get("matchExpressions") or []:
            if expr.get("operator") == "In" and len(expr.get("values") or []) == 1:
                one[str(expr.get("key"))] = str(expr["values"][0])
        pinned.append(one)
    if pinned:
        common = {k: v for k, v in pinned[0].items() if all(t.get(k) == v for t in pinned[1:])}
        labels = {**common, **labels}
    return labels


def gpu_count(container: Mapping[str, Any]) -> int | None:
    """The container's `nvidia.com/gpu` limit (else request), or None when it asks for none."""
    resources = container.get("resources") or {}
    for part in ("limits", "requests"):
        value = (resources.get(part) or {}).get("nvidia.com/gpu")
        if value is not None:
            try:
                return int(str(value).strip())
            except ValueError:
                return None
    return None

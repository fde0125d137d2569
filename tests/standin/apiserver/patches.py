"""The three PATCH types: JSON Patch (RFC 6902), JSON Merge Patch (RFC 7386), strategic merge.

Strategic merge merges the lists Kubernetes declares with a merge key (containers by `name`, …)
and replaces every other list whole, which is why patching one container's args is safe.
"""

from __future__ import annotations

import copy
from typing import Any

from tests.standin.apiserver.errors import ApiError

JSON_PATCH = "application/json-patch+json"
MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"

# patchMergeKey of the lists the served types declare with patchStrategy=merge.
MERGE_KEYS = {"containers": "name", "initContainers": "name", "ephemeralContainers": "name", "env": "name",
              "volumes": "name", "volumeMounts": "mountPath", "ports": "containerPort", "imagePullSecrets": "name",
              "conditions": "type", "ownerReferences": "uid", "finalizers": None}


def apply_patch(content_type: str, target: dict, patch: Any) -> dict:
    kind = content_type.split(";", 1)[0].strip()
    if kind == JSON_PATCH:
        if not isinstance(patch, list):
            raise ApiError.bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
        return json_patch(target, patch)
    if not isinstance(patch, dict):
        raise ApiError.bad_request(f"a {kind} body must be a JSON object")
    if kind == MERGE_PATCH:
        return merge_patch(target, patch)
    if kind == STRATEGIC_PATCH:
        return strategic_merge(target, patch)
    raise ApiError(415, "UnsupportedMediaType", f"the body of the request was in an unknown format - accepted media "
                                                f"types include: {JSON_PATCH}, {MERGE_PATCH}, {STRATEGIC_PATCH}")


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge(target: Any, patch: Any, field: str | None = None) -> Any:
    if isinstance(patch, dict):
        if patch.get("$patch") == "replace":
            return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
        if patch.get("$patch") == "delete":
            return None
        result = copy.deepcopy(target) if isinstance(target, dict) else {}
        for key, value in patch.items():
            if key.startswith("$setElementOrder/") or key == "$retainKeys":
                continue  # ordering hints from kubectl apply; the merged order is good enough here
            if key.startswith("$"):
                raise ApiError.bad_request(f"unknown patch directive {key!r}")
            if value is None:
                result.pop(key, None)
            else:
                merged = strategic_merge(result.get(key), value, key)
                if merged is None:
                    result.pop(key, None)
                else:
                    result[key] = merged
        return result
    if isinstance(patch, list) and field in MERGE_KEYS and MERGE_KEYS[field] and isinstance(target, list):
        return _merge_list(target, patch, MERGE_KEYS[field])
    return copy.deepcopy(patch)  # primitives, and lists without a merge key: replaced whole


def _merge_list(target: list, patch: list, key: str) -> list:
    result = copy.deepcopy(target)
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise ApiError.bad_request(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, existing in enumerate(result) if existing.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                result.pop(index)
            continue
        if index is None:
            result.append(strategic_merge({}, item))
        else:
            result[index] = strategic_merge(result[index], item)
    return result


# --- RFC 6902 --------------------------------------------------------------------------------

def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise ApiError(422, "Invalid", f"JSON pointer {path!r} must start with /")
    return [part.replace("~1", "/").replace("~0", "~") for part in path[1:].split("/")]


def _parent(doc: Any, parts: list[str], path: str) -> tuple[Any, str]:
    node = doc
    for part in parts[:-1]:
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ApiError(422, "Invalid", f"doc is missing path: {path!r}")
    return node, parts[-1]


def _get(doc: Any, path: str) -> Any:
    node = doc
    for part in _pointer(path):
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            raise ApiError(422, "Invalid", f"doc is missing path: {path!r}")
    return node


def _remove(doc: Any, path: str) -> Any:
    parent, last = _parent(doc, _pointer(path), path)
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list) and last.isdigit() and int(last) < len(parent):
        return parent.pop(int(last))
    raise ApiError(422, "Invalid", f"doc is missing path: {path!r}")


def _add(doc: Any, path: str, value: Any, *, replace: bool) -> Any:
    parts = _pointer(path)
    if not parts:
        return copy.deepcopy(value)
    parent, last = _parent(doc, parts, path)
    if isinstance(parent, dict):
        if replace and last not in parent:
            raise ApiError(422, "Invalid", f"replace operation does not apply: doc is missing key: {path}")
        parent[last] = copy.deepcopy(value)
    elif isinstance(parent, list):
        if last == "-" and not replace:
            parent.append(copy.deepcopy(value))
        elif last.isdigit() and int(last) <= len(parent) - (1 if replace else 0):
            if replace:
                parent[int(last)] = copy.deepcopy(value)
            else:
                parent.insert(int(last), copy.deepcopy(value))
        else:
            raise ApiError(422, "Invalid", f"index out of range in {path!r}")
    else:
        raise ApiError(422, "Invalid", f"doc is missing path: {path!r}")
    return doc


def json_patch(target: dict, ops: list) -> dict:
    doc = copy.deepcopy(target)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op or "path" not in op:
            raise ApiError.bad_request(f"invalid JSON Patch operation {op!r}")
        name, path = op["op"], op["path"]
        if name == "test":
            if _get(doc, path) != op.get("value"):
                raise ApiError(422, "Invalid", f"the server rejected our request due to an error in our request: "
                                               f"testing value {path} failed: test failed")
        elif name == "remove":
            _remove(doc, path)
        elif name in ("add", "replace"):
            doc = _add(doc, path, op.get("value"), replace=name == "replace")
        elif name in ("move", "copy"):
            value = _get(doc, op["from"]) if name == "copy" else _remove(doc, op["from"])
            doc = _add(doc, path, value, replace=False)
        else:
            raise ApiError.bad_request(f"unexpected JSON Patch operation {name!r}")
    return doc

"""Objects by resource, namespace and name, with the API server's bookkeeping.

One counter gives every write a new `resourceVersion`; a stale one in a write is a 409, as are
failed uid/resourceVersion preconditions on delete. Dry runs compute the result and store nothing.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import threading
import uuid
from collections.abc import Callable

from tests.standin.apiserver.errors import ApiError
from tests.standin.apiserver.resources import Resource
from tests.standin.apiserver.selectors import field_selector, label_selector


def now_utc() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def rfc3339(at: dt.datetime) -> str:
    return at.astimezone(dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


Key = tuple[str, str, str]  # (group_resource, namespace, name)


class Store:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.objects: dict[Key, dict] = {}
        self.revision = 1000
        self.after_write: list[Callable[[Resource, str, str], None]] = []

    def _next(self) -> str:
        self.revision += 1
        return str(self.revision)

    def _notify(self, res: Resource, namespace: str, name: str) -> None:
        for hook in self.after_write:
            hook(res, namespace, name)

    @staticmethod
    def _key(res: Resource, namespace: str | None, name: str) -> Key:
        return (res.group_resource, namespace if res.namespaced else "", name)

    def get(self, res: Resource, namespace: str | None, name: str) -> dict:
        with self.lock:
            obj = self.objects.get(self._key(res, namespace, name))
            if obj is None:
                raise ApiError.not_found(res.group_resource, name)
            return copy.deepcopy(obj)

    def find(self, res: Resource, namespace: str | None, name: str) -> dict | None:
        try:
            return self.get(res, namespace, name)
        except ApiError:
            return None

    def list(self, res: Resource, namespace: str | None, *, labels: str | None = None, fields: str | None = None,
             limit: int | None = None, continue_: str | None = None) -> tuple[list[dict], str, str | None]:
        match_labels, match_fields = label_selector(labels), field_selector(fields)
        with self.lock:
            items = [copy.deepcopy(obj) for (gr, ns, _), obj in sorted(self.objects.items())
                     if gr == res.group_resource and (namespace is None or ns == namespace)
                     and match_labels(obj["metadata"].get("labels") or {}) and match_fields(obj)]
            revision = str(self.revision)
        start = 0
        if continue_:
            try:
                start = int(json.loads(continue_)["start"])
            except (ValueError, KeyError, TypeError):
                raise ApiError(410, "Expired", "the provided continue parameter is too old or malformed") from None
        end = len(items) if not limit else min(start + limit, len(items))
        token = json.dumps({"start": end}) if end < len(items) else None
        return items[start:end], revision, token

    def create(self, res: Resource, namespace: str | None, obj: dict, *, dry_run: bool = False) -> dict:
        obj = copy.deepcopy(obj)
        meta = obj.setdefault("metadata", {})
        if not meta.get("name"):
            if meta.get("generateName"):
                meta["name"] = meta["generateName"] + uuid.uuid4().hex[:5]
            else:
                raise ApiError.invalid(res.group_resource, "", "metadata.name: Required value: name is required")
        if res.namespaced:
            if meta.get("namespace") not in (None, namespace):
                raise ApiError.bad_request("the namespace of the provided object does not match the namespace sent "
                                           "on the request")
            meta["namespace"] = namespace
        obj["apiVersion"], obj["kind"] = res.api_version, res.kind
        with self.lock:
            key = self._key(res, namespace, meta["name"])
            if key in self.objects:
                raise ApiError.already_exists(res.group_resource, meta["name"])
            meta["uid"] = str(uuid.uuid4())
            meta["creationTimestamp"] = rfc3339(now_utc())
            if "spec" in obj and res.kind in ("StatefulSet", "Deployment", "DaemonSet"):
                meta["generation"] = 1
            if dry_run:
                meta["resourceVersion"] = str(self.revision)
                return obj
            meta["resourceVersion"] = self._next()
            self.objects[key] = obj
            self._notify(res, namespace or "", meta["name"])
            return copy.deepcopy(self.objects[key])

    def update(self, res: Resource, namespace: str | None, name: str, obj: dict, *, dry_run: bool = False,
               keep_status: bool = True) -> dict:
        """A PUT: the stored object becomes `obj`, if `obj` carries the current resourceVersion (or none)."""
        obj = copy.deepcopy(obj)
        with self.lock:
            key = self._key(res, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise ApiError.not_found(res.group_resource, name)
            meta = obj.setdefault("metadata", {})
            if meta.get("name", name) != name:
                raise ApiError.bad_request(f"the name of the object ({meta.get('name')}) does not match the name on "
                                           f"the URL ({name})")
            sent = meta.get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise ApiError.conflict(res.group_resource, name, "the object has been modified; please apply your "
                                        "changes to the latest version and try again")
            for field in ("uid", "creationTimestamp", "generation", "namespace"):
                if field in current["metadata"]:
                    meta[field] = current["metadata"][field]
            meta["name"] = name
            obj["apiVersion"], obj["kind"] = res.api_version, res.kind
            if keep_status and "status" in current:
                obj["status"] = copy.deepcopy(current["status"])
            if "generation" in meta and obj.get("spec") != current.get("spec"):
                meta["generation"] = current["metadata"]["generation"] + 1
            if dry_run:
                meta["resourceVersion"] = current["metadata"]["resourceVersion"]
                return obj
            meta["resourceVersion"] = self._next()
            self.objects[key] = obj
            self._notify(res, namespace or "", name)
            return copy.deepcopy(obj)

    def delete(self, res: Resource, namespace: str | None, name: str, *, preconditions: dict | None = None,
               dry_run: bool = False) -> dict:
        with self.lock:
            key = self._key(res, namespace, name)
            current = self.objects.get(key)
            if current is None:
                raise ApiError.not_found(res.group_resource, name)
            pre = preconditions or {}
            uid, version = current["metadata"]["uid"], current["metadata"]["resourceVersion"]
            if pre.get("uid") and pre["uid"] != uid:
                raise ApiError.conflict(res.group_resource, name, f"Precondition failed: UID in precondition: "
                                                                  f"{pre['uid']}, UID in object meta: {uid}")
            if pre.get("resourceVersion") and pre["resourceVersion"] != version:
                raise ApiError.conflict(res.group_resource, name, f"Precondition failed: ResourceVersion in "
                                                                  f"precondition: {pre['resourceVersion']}, "
                                                                  f"ResourceVersion in object meta: {version}")
            gone = copy.deepcopy(current)
            if dry_run:
                return gone
            del self.objects[key]
            self._next()
            self._notify(res, namespace or "", name)
            return gone

    def put_status(self, res: Resource, namespace: str | None, name: str, status: dict) -> None:
        """What a controller or the kubelet writes: the status, with a new resourceVersion."""
        with self.lock:
            obj = self.objects[self._key(res, namespace, name)]
            if obj.get("status") != status:
                obj["status"] = status
                obj["metadata"]["resourceVersion"] = self._next()

"""API errors as `metav1.Status` documents, with the codes and reasons a real API server uses.

Clients branch on `code` and `reason`, and people read `message`; all three match the real ones.
"""

from __future__ import annotations


class ApiError(Exception):
    def __init__(self, code: int, reason: str, message: str, *, details: dict | None = None,
                 retry_after: int | None = None):
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.details = dict(details or {})
        self.retry_after = retry_after
        if retry_after is not None:
            self.details.setdefault("retryAfterSeconds", retry_after)

    def status(self) -> dict:
        doc = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": self.message,
               "reason": self.reason, "code": self.code}
        if self.details:
            doc["details"] = self.details
        return doc

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(self.retry_after)} if self.retry_after is not None else {}

    @classmethod
    def not_found(cls, group_resource: str, name: str) -> "ApiError":
        kind = group_resource.split(".", 1)
        return cls(404, "NotFound", f'{group_resource} "{name}" not found',
                   details={"name": name, "group": kind[1] if len(kind) > 1 else "", "kind": kind[0]})

    @classmethod
    def already_exists(cls, group_resource: str, name: str) -> "ApiError":
        kind = group_resource.split(".", 1)
        return cls(409, "AlreadyExists", f'{group_resource} "{name}" already exists',
                   details={"name": name, "group": kind[1] if len(kind) > 1 else "", "kind": kind[0]})

    @classmethod
    def conflict(cls, group_resource: str, name: str, why: str) -> "ApiError":
        kind = group_resource.split(".", 1)
        return cls(409, "Conflict", f'Operation cannot be fulfilled on {group_resource} "{name}": {why}',
                   details={"name": name, "group": kind[1] if len(kind) > 1 else "", "kind": kind[0]})

    @classmethod
    def bad_request(cls, message: str) -> "ApiError":
        return cls(400, "BadRequest", message)

    @classmethod
    def invalid(cls, group_resource: str, name: str, message: str) -> "ApiError":
        return cls(422, "Invalid", f'{group_resource} "{name}" is invalid: {message}')

    @classmethod
    def forbidden(cls, user: str, verb: str, resource: str, group: str, namespace: str | None,
                  name: str | None) -> "ApiError":
        plural = resource.split("/")[0] + (f".{group}" if group else "")
        what = f'{plural} "{name}"' if name else plural
        where = f' in the namespace "{namespace}"' if namespace else " at the cluster scope"
        return cls(403, "Forbidden", f'{what} is forbidden: User "{user}" cannot {verb} resource "{resource}" '
                                     f'in API group "{group}"{where}',
                   details={"name": name or "", "group": group, "kind": resource})

"""Plain HTTP GETs for health probes, on the standard library (no extra client needed).

Any answer, including 4xx/5xx, is a response; only no answer in time is an error.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request

from runbook.backends.base import HttpResponse
from runbook.errors import BackendUnavailable

MAX_BODY = 64 * 1024


class UrllibHttp:
    def get(self, url: str, *, timeout: float) -> HttpResponse:
        if not url.startswith(("http://", "https://")):
            raise BackendUnavailable(f"{url}: only http and https are probed")
        started = time.monotonic()
        request = urllib.request.Request(url, headers={"User-Agent": "runbook-probe"})
        try:
            with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 - scheme checked above
                body = response.read(MAX_BODY).decode("utf-8", "replace")
                return HttpResponse(response.status, time.monotonic() - started, body)
        except urllib.error.HTTPError as exc:
            body = exc.read(MAX_BODY).decode("utf-8", "replace") if exc.fp else ""
            exc.close()
            return HttpResponse(exc.code, time.monotonic() - started, body)
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", exc)
            raise BackendUnavailable(f"GET {url} failed after {time.monotonic() - started:.1f}s: {reason}") from None

"""Plain-HTTP requests the emulator services use to prove they answer real API calls.

Standard library only, so ``kbqe stack status`` stays cheap: importing the google-cloud
clients costs seconds, and a readiness poll runs every quarter second during start-up.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class HttpAnswer:
    """Status and decoded JSON body (``None`` when the body is not JSON)."""

    status: int
    body: Any


def request_json(
    method: str,
    url: str,
    payload: Any | None = None,
    timeout: float = 2.0,
) -> HttpAnswer | None:
    """Send one request; the answer (also for 4xx/5xx), or ``None`` when nothing answered."""
    data = None if payload is None else json.dumps(payload).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return HttpAnswer(resp.status, _decode(resp.read()))
    except urllib.error.HTTPError as err:
        return HttpAnswer(err.code, _decode(err.read()))
    except (urllib.error.URLError, OSError):
        return None


def _decode(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None

"""Fixtures of the security tests: recognizable secrets, a scanner for them, a stub registry
with basic auth (stdlib, for fast unit tests of error paths) and a real Apicurio with basic
auth (integration)."""

from __future__ import annotations

import base64
import json
import logging
import re
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kbqe_dagster_tests.security.authenticated_registry import BasicAuthApicurioService

KAFKA_SECRET = "SuperSecret-123"
REGISTRY_USER = "kbqe"
REGISTRY_SECRET = "SuperSecret-456"
WRONG_SECRET = "SuperSecret-789"  # a wrong password is a secret too: often a near miss
OAUTH_CLIENT_SECRET = "SuperSecret-0Auth"
SECRETS = (KAFKA_SECRET, REGISTRY_SECRET, WRONG_SECRET, OAUTH_CLIENT_SECRET)
# Also the base64 of "user:password", as an Authorization header would carry it.
_ENCODED = tuple(base64.b64encode(f"{REGISTRY_USER}:{s}".encode()).decode() for s in SECRETS)
_PATTERN = re.compile("|".join(re.escape(s) for s in SECRETS + _ENCODED))
# A run of base64 (either alphabet) long enough to hold a secret: a pickled object, a token or
# a serialized config in a log line or a database row may carry one encoded.
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/_-]{20,}={0,2}")


def secrets_in(text: str | bytes) -> list[str]:
    """The secrets (or their basic-auth encodings) found in ``text``, as is or inside a run of
    base64 (decoded from each of its first four characters: a prefix such as py4j's ``j``
    would shift it)."""
    if isinstance(text, bytes):
        text = text.decode("latin-1")
    found = _PATTERN.findall(text)
    for match in _BASE64_RUN.finditer(text):
        run = match.group().rstrip("=").replace("-", "+").replace("_", "/")
        for start in range(4):
            piece = run[start:]
            piece = piece[: len(piece) - len(piece) % 4]
            found.extend(_PATTERN.findall(base64.b64decode(piece).decode("latin-1")))
    return found


def log_text(records: Iterable[logging.LogRecord]) -> str:
    """Everything a log handler could print: messages, exception text and stack."""
    parts = []
    for record in records:
        parts.append(record.getMessage())
        if record.exc_info and record.exc_info[1] is not None:
            parts.append(repr(record.exc_info[1]))
        parts.extend(filter(None, (record.exc_text, record.stack_info)))
    return "\n".join(parts)


def files_with_secrets(root: Path) -> dict[str, list[str]]:
    """Every file under ``root`` (databases, logs, captured output) that holds a secret."""
    found = {}
    for path in root.rglob("*"):
        if path.is_file():
            hits = secrets_in(path.read_bytes())
            if hits:
                found[str(path.relative_to(root))] = sorted(set(hits))
    return found


# --- a stub registry: GET /schemas/ids/{id} behind basic auth ------------------------------------
STUB_SCHEMA_ID = 7
STUB_SCHEMA = {
    "type": "record",
    "name": "Order",
    "namespace": "com.acme.corpus",
    "fields": [{"name": "orderId", "type": "string"}],
}


@dataclass
class StubRegistry:
    url: str
    user_info: str
    authorizations: list[str | None]  # the Authorization header of every request


def _handler(expected: str, seen: list[str | None]) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            if not self._authorized():
                return
            match = re.fullmatch(r"/schemas/ids/(\d+)", self.path.split("?")[0])
            if match and int(match.group(1)) == STUB_SCHEMA_ID:
                self._answer(200, {"schema": json.dumps(STUB_SCHEMA), "schemaType": "AVRO"})
            else:
                self._answer(404, {"error_code": 40403, "message": "Schema not found"})

        def do_POST(self) -> None:  # noqa: N802 - registering is not implemented
            if self._authorized():
                self._answer(405, {"error_code": 405, "message": "read-only stub"})

        def _authorized(self) -> bool:
            auth = self.headers.get("Authorization")
            seen.append(auth)
            if auth == expected:
                return True
            self._answer(
                401,
                {"error_code": 401, "message": "Unauthorized"},
                {"WWW-Authenticate": 'Basic realm="registry"'},
            )
            return False

        def _answer(self, status: int, body: dict, headers: dict | None = None) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(raw)))
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass  # stderr chatter; the requests are recorded in ``seen``

    return Handler


@pytest.fixture
def stub_registry() -> Iterator[StubRegistry]:
    user_info = f"{REGISTRY_USER}:{REGISTRY_SECRET}"
    expected = "Basic " + base64.b64encode(user_info.encode()).decode()
    seen: list[str | None] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(expected, seen))
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield StubRegistry(f"http://127.0.0.1:{server.server_address[1]}", user_info, seen)
    finally:
        server.shutdown()
        server.server_close()


# --- the real Apicurio with basic auth -----------------------------------------------------------
@pytest.fixture(scope="session")
def authenticated_registry() -> Iterator[BasicAuthApicurioService]:
    """A running Apicurio that requires ``REGISTRY_USER:REGISTRY_SECRET``; stopped at the end
    of the session if this fixture started it (by its pid file)."""
    service = BasicAuthApicurioService(REGISTRY_USER, REGISTRY_SECRET)
    started = service.pid() is None
    try:
        service.up()
        yield service
    finally:
        if started:
            service.down()

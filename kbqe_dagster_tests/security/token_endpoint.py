"""An OAuth 2 token endpoint of a test's own, for the OAUTHBEARER listener of
``secured_kafka.py``: the client-credentials grant that librdkafka's
``sasl.oauthbearer.method=oidc`` speaks (a POST carrying the client id and secret in HTTP basic
auth), answered with an unsigned JWT (``alg: none``) that the broker's unsecured validator
accepts. It checks the client secret, so a client the broker let in really sent the secret, and
it counts what it granted and refused. Stdlib only, a thread of the test process.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kbqe_dagster.localstack.base import HOST

TOKEN_LIFETIME_S = 3600


@dataclass
class TokenEndpoint:
    url: str
    client_id: str
    client_secret: str
    granted: list[str] = field(default_factory=list)
    """The subject of every token handed out."""
    refused: int = 0
    """Requests without the right client id and secret."""


def unsigned_jwt(subject: str, lifetime_s: int = TOKEN_LIFETIME_S) -> str:
    """A JWT with no signature (``alg: none``, an empty third part): what Kafka's unsecured
    validator takes, with the ``sub`` and ``exp`` librdkafka reads from it."""

    def part(claims: dict) -> str:
        return base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()

    now = int(time.time())
    return f"{part({'alg': 'none'})}.{part({'sub': subject, 'iat': now, 'exp': now + lifetime_s})}."


def _handler(endpoint: TokenEndpoint) -> type[BaseHTTPRequestHandler]:
    expected = (
        "Basic "
        + base64.b64encode(f"{endpoint.client_id}:{endpoint.client_secret}".encode()).decode()
    )

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            self.rfile.read(int(self.headers.get("Content-Length") or 0))  # the grant's form
            if self.headers.get("Authorization") != expected:
                endpoint.refused += 1
                self._answer(401, {"error": "invalid_client"})
                return
            endpoint.granted.append(endpoint.client_id)
            token = unsigned_jwt(endpoint.client_id)
            self._answer(
                200,
                {"access_token": token, "token_type": "bearer", "expires_in": TOKEN_LIFETIME_S},
            )

        def _answer(self, status: int, body: dict) -> None:
            raw = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, *args: object) -> None:
            pass  # stderr chatter; the grants are counted on the endpoint

    return Handler


@contextmanager
def token_endpoint(client_id: str, client_secret: str) -> Iterator[TokenEndpoint]:
    """A running token endpoint on a free port of 127.0.0.1, stopped on exit."""
    endpoint = TokenEndpoint("", client_id, client_secret)
    server = ThreadingHTTPServer((HOST, 0), _handler(endpoint))
    endpoint.url = f"http://{HOST}:{server.server_address[1]}/oauth2/token"
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield endpoint
    finally:
        server.shutdown()
        server.server_close()

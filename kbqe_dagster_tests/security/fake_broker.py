"""A listening socket that speaks just enough of the Kafka protocol to see what a client sends
before it is authenticated: no SASL broker needed to prove SASL/SSL settings reach the wire.

- A TLS client (``SSL``/``SASL_SSL``) opens with a TLS handshake record; it is recorded as is.
- A ``SASL_PLAINTEXT`` client sends ApiVersions, then SaslHandshake(mechanism), then
  SaslAuthenticate(auth bytes). This endpoint answers the first two (advertising exactly the
  mechanism the client asked for) and records the mechanism and the auth bytes — for PLAIN
  ``\\0user\\0password``, for SCRAM the client-first message ``n,,n=user,r=nonce`` — then
  closes the connection, so the client never gets in.

Request layout (Kafka protocol guide): int32 size, int16 api key, int16 version, int32
correlation id, nullable string client id, then the body.
"""

from __future__ import annotations

import socket
import struct
import threading
from dataclasses import dataclass, field

API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE = 18, 17, 36
TLS_HANDSHAKE_RECORD = 0x16


@dataclass
class Seen:
    tls_client_hello: bool = False
    api_keys: list[int] = field(default_factory=list)
    mechanism: str | None = None
    auth_bytes: bytes | None = None
    raw: bytes = b""  # everything received, for "the secret is (not) on the wire" checks


class FakeBroker:
    """``with FakeBroker() as broker: ... broker.bootstrap ... broker.seen``"""

    def __init__(self) -> None:
        self._server = socket.create_server(("127.0.0.1", 0))
        self._server.settimeout(0.2)
        self.bootstrap = f"127.0.0.1:{self._server.getsockname()[1]}"
        self.seen = Seen()
        self._stop = threading.Event()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> FakeBroker:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        self._server.close()

    def wait(self, timeout: float = 10.0) -> Seen:
        """Block until one connection has been handled (or ``timeout``)."""
        self._done.wait(timeout)
        return self.seen

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self._server.accept()
            except TimeoutError:
                continue
            with conn:
                conn.settimeout(5)
                try:
                    self._handle(conn)
                except (OSError, struct.error):
                    pass  # the client gave up; what it sent is recorded
            self._done.set()

    def _handle(self, conn: socket.socket) -> None:
        first = conn.recv(1, socket.MSG_PEEK)
        if first and first[0] == TLS_HANDSHAKE_RECORD:
            self.seen.tls_client_hello = True
            self.seen.raw += conn.recv(65536)
            return
        while True:
            request = self._frame(conn)
            api_key, _version, correlation = struct.unpack_from(">hhi", request)
            self.seen.api_keys.append(api_key)
            body = request[10 + struct.unpack_from(">h", request, 8)[0] :]  # after client id
            if api_key == API_VERSIONS:
                conn.sendall(_api_versions_response(correlation))
            elif api_key == SASL_HANDSHAKE:
                self.seen.mechanism = _string(body)
                conn.sendall(_handshake_response(correlation, self.seen.mechanism))
            elif api_key == SASL_AUTHENTICATE:
                self.seen.auth_bytes = _bytes(body)
                return
            else:
                return

    def _frame(self, conn: socket.socket) -> bytes:
        size = struct.unpack(">i", self._exactly(conn, 4))[0]
        return self._exactly(conn, size)

    def _exactly(self, conn: socket.socket, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = conn.recv(n - len(out))
            if not chunk:
                raise OSError("client closed the connection")
            out += chunk
        self.seen.raw += out
        return out


def _sized(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def _api_versions_response(correlation: int) -> bytes:
    """ApiVersions v3 (flexible body, header v0): error 0, SaslHandshake 0..1 and
    SaslAuthenticate 0..1 only, throttle 0, no tagged fields."""
    keys = [(SASL_HANDSHAKE, 0, 1), (SASL_AUTHENTICATE, 0, 1)]
    body = struct.pack(">ih", correlation, 0) + bytes([len(keys) + 1])  # compact array: n + 1
    for key in keys:
        body += struct.pack(">hhh", *key) + b"\x00"
    return _sized(body + struct.pack(">i", 0) + b"\x00")


def _handshake_response(correlation: int, mechanism: str) -> bytes:
    name = mechanism.encode()
    return _sized(struct.pack(">ihih", correlation, 0, 1, len(name)) + name)


def _string(body: bytes) -> str:
    n = struct.unpack_from(">h", body)[0]
    return body[2 : 2 + n].decode()


def _bytes(body: bytes) -> bytes:
    """SaslAuthenticate v0/v1 (non-flexible): int32 length + auth bytes."""
    n = struct.unpack_from(">i", body)[0]
    return body[4 : 4 + n]

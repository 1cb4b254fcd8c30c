"""A second local Apicurio Registry 3.0.9 that requires HTTP basic auth, for the tests of
registry authentication and of credential hygiene. The stack's own registry stays open.

How, without Keycloak: Apicurio's own option ``apicurio.authn.basic-client-credentials``
exchanges basic credentials for an OIDC client-credentials token, so it needs an OIDC server.
But the 3.0.9 build ships Quarkus' properties-file realm (``quarkus-elytron-security-
properties-file``, with ``quarkus.security.users.embedded.enabled=true`` built in), so plain
Quarkus HTTP security is enough: ``quarkus.http.auth.basic=true``, one embedded user, and a
permission policy that makes every ``/apis/*`` path require an authenticated user. Verified
by hand against 3.0.9: no credentials → 401 with ``www-authenticate: basic``, wrong password
→ 401, right password → 200.

The settings go into ``config/application.properties`` under the service's run directory (the
process's working directory, which Quarkus reads at start-up) rather than onto the command
line, so the test password is not visible in the process list.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import os
import urllib.error
import urllib.request
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.apicurio import COMPATIBILITY, ApicurioService
from kbqe_dagster.localstack.endpoints import local_endpoints

DEFAULT_PORT = 18091


class BasicAuthApicurioService(ApicurioService):
    """Apicurio with its APIs behind HTTP basic auth for one user (role ``sr-admin``)."""

    name = "apicurio-auth"

    def __init__(self, user: str, password: str, home: Path | None = None) -> None:
        port = int(os.environ.get("KBQE_LOCAL_REGISTRY_AUTH_PORT", DEFAULT_PORT))
        super().__init__(home, dataclasses.replace(local_endpoints(), registry_port=port))
        self.user, self.password = user, password

    @property
    def user_info(self) -> str:
        return f"{self.user}:{self.password}"

    def launch(self) -> int:
        config = self.dirs.run / "config" / "application.properties"
        config.parent.mkdir(parents=True, exist_ok=True)
        config.touch(mode=0o600)
        config.write_text(
            "\n".join(
                [
                    "quarkus.http.auth.basic=true",
                    "quarkus.security.users.embedded.enabled=true",
                    "quarkus.security.users.embedded.plain-text=true",
                    f"quarkus.security.users.embedded.users.{self.user}={self.password}",
                    f"quarkus.security.users.embedded.roles.{self.user}=sr-admin",
                    "quarkus.http.auth.permission.kbqe-api.paths=/apis/*",
                    "quarkus.http.auth.permission.kbqe-api.policy=authenticated",
                ]
            )
            + "\n"
        )
        return super().launch()

    def request(self, method: str, path: str, payload: object = None,
                user_info: str | None = "default") -> tuple[int, object]:  # fmt: skip
        """(status, JSON body or None) of one ccompat request; ``user_info`` None sends no
        credentials, the default sends this service's user."""
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(f"{self.endpoint}{path}", data=data, method=method)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        creds = self.user_info if user_info == "default" else user_info
        if creds is not None:
            req.add_header("Authorization", "Basic " + base64.b64encode(creds.encode()).decode())
        try:
            with urllib.request.urlopen(req, timeout=2.0) as resp:
                return resp.status, _json(resp.read())
        except urllib.error.HTTPError as err:
            return err.code, _json(err.read())

    def ready(self) -> bool:
        try:
            status, body = self.request("GET", "/subjects")
        except (urllib.error.URLError, OSError):
            return False
        return status == 200 and isinstance(body, list)

    def after_ready(self) -> None:
        status, body = self.request("PUT", "/config", {"compatibility": COMPATIBILITY})
        if status != 200:
            raise StackError(f"{self.name}: setting compatibility failed: HTTP {status} {body}")


def _json(raw: bytes) -> object:
    try:
        return json.loads(raw)
    except ValueError:
        return None

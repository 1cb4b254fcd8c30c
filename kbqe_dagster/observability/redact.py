"""Keeping secrets out of everything the exporter says: ``/metrics``, ``/healthcheck`` and logs.

Connection errors are the risk: a client library may echo its configuration, a URL may carry
``user:password@``. Every text that leaves the exporter and did not originate in kbqe goes
through :class:`Redactor`, which knows the secret values of the current connections.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from kbqe_dagster.core.client_properties import is_secret_property

REDACTED = "***"
_URL_USERINFO = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s]+@")
# Shorter values would blank out ordinary words (a password "a" in every message).
_MIN_SECRET_LENGTH = 3


@dataclass(frozen=True)
class Redactor:
    """Replaces known secret values and URL credentials by ``***``."""

    secrets: tuple[str, ...] = ()

    def __repr__(self) -> str:  # the default repr would print the secrets themselves
        return f"Redactor({len(self.secrets)} secret(s))"

    @classmethod
    def of(cls, values: Iterable[str | None]) -> Redactor:
        found: set[str] = set()
        for value in values:
            if not value:
                continue
            found.add(value)
            # basic auth "user:password": the password alone may be echoed too
            user, sep, password = value.partition(":")
            if sep and password:
                found.add(password)
        kept = sorted((s for s in found if len(s) >= _MIN_SECRET_LENGTH), key=len, reverse=True)
        return cls(tuple(kept))

    def __call__(self, text: object) -> str:
        out = _URL_USERINFO.sub(lambda m: m.group("scheme") + REDACTED + "@", str(text))
        for secret in self.secrets:  # longest first, so a secret's substring is not left half-done
            out = out.replace(secret, REDACTED)
        return out


def secret_settings(settings: Mapping[str, object]) -> list[str]:
    """The values of the settings whose names say they are secret (the same rule as the
    settings' own reprs: :func:`~kbqe_dagster.core.client_properties.is_secret_property`)."""
    return [str(value) for name, value in settings.items() if value and is_secret_property(name)]

"""GCP credentials the dagster-gcp way, for every Google client the product builds.

dagster-gcp's resources take ``gcp_credentials``: a service account's JSON key, base64
encoded (``base64 -w0 key.json``), usually through ``dg.EnvVar``; ``None`` means Application
Default Credentials. The BigQuery client, the Storage Write API client and the GCS staging
store all read that one value here, so a deployment configures its credentials once.

dagster-gcp itself applies the key by writing it to a temporary file and pointing the
process-wide ``GOOGLE_APPLICATION_CREDENTIALS`` at it while a client is built: a race between
the threads of a code server (sensors) and refused when the variable is already set. Here the
key becomes a credentials object passed to the client instead, with the same meaning.
"""

from __future__ import annotations

import base64
import binascii
import json
from typing import Any

from kbqe_dagster.core.errors import ConfigError


def credentials_from_base64(gcp_credentials: str | None) -> Any | None:
    """The service account credentials of ``gcp_credentials`` (base64 JSON key), or ``None``
    for Application Default Credentials. The key's content never appears in an error."""
    if not gcp_credentials:
        return None
    try:
        info = json.loads(base64.b64decode(gcp_credentials, validate=True))
    except (binascii.Error, ValueError) as error:
        raise ConfigError(
            "gcp_credentials: expected a base64-encoded service account JSON key "
            f"(base64 -w0 key.json); it does not decode ({type(error).__name__})"
        ) from None
    if not isinstance(info, dict) or info.get("type") != "service_account":
        raise ConfigError(
            "gcp_credentials: the decoded JSON is not a service account key "
            '("type": "service_account")'
        )
    from google.oauth2 import service_account

    try:
        return service_account.Credentials.from_service_account_info(info)
    except ValueError as error:
        # google-auth names the missing field; the key's values are not in its message.
        raise ConfigError(f"gcp_credentials: not a usable service account key: {error}") from None

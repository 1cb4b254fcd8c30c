"""A second local Kafka broker whose listeners require authentication, for the tests of
``KBQE_KAFKA_CONF_<name>``: the local stack's KafkaService (KRaft, the same jars from Maven
Central, from the stack's download cache) with its own home, its own free ports on 127.0.0.1
and two more listeners. The stack's own broker and its listeners are left alone.

- ``MTLS`` (SSL): ``ssl.client.auth=required``; the key, certificate chain and trusted CA are
  PEM files (``ssl.keystore.type=PEM``, no keytool), made by the test (``certificates.py``).
- ``OAUTH`` (SASL_PLAINTEXT, OAUTHBEARER): Kafka's unsecured JWS validator, the default
  server callback of OAUTHBEARER, meant for tests: it accepts an unsigned token whose claims
  are well formed. The tests' clients get theirs from ``token_endpoint.py`` (OIDC client
  credentials, as against a real identity provider).
- ``PLAINTEXT`` for the broker's own traffic (it is its inter-broker listener) and for the
  readiness check; the tests reach it only through the two above.
"""

from __future__ import annotations

import dataclasses
import socket
from pathlib import Path

from kbqe_dagster.localstack.base import HOST, ServiceDirs, stack_home
from kbqe_dagster.localstack.endpoints import local_endpoints
from kbqe_dagster.localstack.kafka import KafkaService
from kbqe_dagster_tests.security.certificates import Certificates

BROKER_PRINCIPAL = "kbqe-broker"


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports free on 127.0.0.1 right now (bound together, then released)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for s in sockets:
            s.bind((HOST, 0))
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class SecuredKafkaService(KafkaService):
    """The stack's KRaft broker with an mTLS and an OAUTHBEARER listener, in ``home``."""

    name = "kafka-auth"
    start_timeout = 180.0

    def __init__(self, home: Path, certificates: Certificates) -> None:
        plain, controller, self.mtls_port, self.oauth_port = free_ports(4)
        endpoints = dataclasses.replace(
            local_endpoints(), kafka_port=plain, kafka_controller_port=controller
        )
        super().__init__(home, endpoints)
        self.certificates = certificates

    @property
    def libs(self) -> Path:
        """The stack's own download of the broker's jars (``kbqe stack up`` made it)."""
        return ServiceDirs("kafka", stack_home()).cache / f"kafka-{self.version}" / "libs"

    @property
    def ports(self) -> tuple[int, ...]:
        return (*super().ports, self.mtls_port, self.oauth_port)

    @property
    def mtls_bootstrap(self) -> str:
        return f"{HOST}:{self.mtls_port}"

    @property
    def oauth_bootstrap(self) -> str:
        return f"{HOST}:{self.oauth_port}"

    def extra_properties(self) -> dict[str, str]:
        plain, controller = self.endpoints.kafka_port, self.endpoints.kafka_controller_port
        served = f"PLAINTEXT://{HOST}:{plain},MTLS://{self.mtls_bootstrap},OAUTH://{self.oauth_bootstrap}"
        certs = self.certificates
        return {
            "listeners": f"{served},CONTROLLER://{HOST}:{controller}",
            "advertised.listeners": served,
            "listener.security.protocol.map": (
                "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,MTLS:SSL,OAUTH:SASL_PLAINTEXT"
            ),
            "listener.name.mtls.ssl.client.auth": "required",
            "listener.name.mtls.ssl.keystore.type": "PEM",
            "listener.name.mtls.ssl.keystore.location": str(certs.server_keystore),
            "listener.name.mtls.ssl.truststore.type": "PEM",
            "listener.name.mtls.ssl.truststore.location": str(certs.ca),
            "listener.name.oauth.sasl.enabled.mechanisms": "OAUTHBEARER",
            "listener.name.oauth.oauthbearer.sasl.jaas.config": (
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required "
                f'unsecuredLoginStringClaim_sub="{BROKER_PRINCIPAL}";'
            ),
        }

"""The local stack's schema registry: Apicurio Registry, spoken to through its
Confluent-compatible API (``/apis/ccompat/v7``), with global compatibility BACKWARD.

Choices, and why:
- Version 3.0.9, the Quarkus "all" tarball from Maven Central
  (``io.apicurio:apicurio-registry-app:3.0.9:tar.gz:all``). The newer 3.3.x application jar is
  compiled for Java 21 (class files version 65) and the stack's JVM is Java 17 (what Kafka 4
  needs); 3.0.9 is the newest 3.x published there that runs on 17. The runner is found by
  name (``*-runner.jar`` in 3.0.x, ``quarkus-run.jar`` in 3.3.x), so moving to a Java 21
  stack is a change of ``APICURIO_VERSION`` only.
- Storage: the SQL storage on an H2 *file* in ``run/apicurio/data`` rather than H2 in memory.
  Kafka's data survives ``kbqe stack down/up`` and its messages carry schema ids; a registry
  that forgot its schemas on restart would hand out id 1 again for a different schema and old
  messages would decode with the wrong schema. Delete ``run/apicurio/data`` together with
  ``run/kafka/data`` for a clean slate.
- HTTP on 127.0.0.1 only, no authentication (the registry's default), heap -Xmx256m.
"""

from __future__ import annotations

import logging
import tarfile
from collections.abc import Sequence
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import HOST, LocalService, spawn
from kbqe_dagster.localstack.jvm import DEPENDENCY_PLUGIN, install_once, require_java, run_maven
from kbqe_dagster.localstack.probe import request_json

log = logging.getLogger(__name__)

APICURIO_VERSION = "3.0.9"
APICURIO_ARTIFACT = f"io.apicurio:apicurio-registry-app:{APICURIO_VERSION}:tar.gz:all"
COMPATIBILITY = "BACKWARD"
# A registry answers a handful of requests: the C1 compiler only and the serial collector
# halve its start-up on a busy 2-core machine (~8s instead of ~14s) and save ~70 MB of RSS.
JVM_OPTIONS = (
    "-Xmx256m",
    "-Xms64m",
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)
_RUNNER_PATTERNS = ("quarkus-run.jar", "*-runner.jar")


class ApicurioService(LocalService):
    """Apicurio Registry with its ccompat API at ``LocalEndpoints.registry_url``."""

    name = "apicurio"
    start_timeout = 120.0

    @property
    def endpoint(self) -> str:
        return self.endpoints.registry_url

    @property
    def ports(self) -> Sequence[int]:
        return (self.endpoints.registry_port,)

    @property
    def app_dir(self) -> Path:
        return self.dirs.cache / f"apicurio-registry-{APICURIO_VERSION}"

    def install(self) -> None:
        require_java()
        install_once(self.app_dir, self._download)

    def _download(self, target: Path) -> None:
        run_maven(
            [
                f"{DEPENDENCY_PLUGIN}:copy",
                f"-Dartifact={APICURIO_ARTIFACT}",
                f"-DoutputDirectory={target}",
            ],
            what=f"Apicurio Registry {APICURIO_VERSION}",
            cwd=self.dirs.cache,
        )
        tarballs = list(target.glob("*.tar.gz"))
        if len(tarballs) != 1:
            raise StackError(
                f"apicurio: expected one tarball from Maven in {target}, "
                f"found {[t.name for t in tarballs]}"
            )
        with tarfile.open(tarballs[0]) as tar:
            tar.extractall(target, filter="data")
        # Maven keeps its own copy in ~/.m2; the extracted tree is all we run.
        tarballs[0].unlink()

    def runner_jar(self) -> Path:
        for pattern in _RUNNER_PATTERNS:
            found = sorted(self.app_dir.glob(pattern))
            if found:
                return found[0]
        raise StackError(
            f"apicurio: no runnable jar ({' or '.join(_RUNNER_PATTERNS)}) in {self.app_dir}; "
            f"delete that directory and run `kbqe stack up` again to download it anew"
        )

    def launch(self) -> int:
        java = require_java()
        self.dirs.ensure()
        database = self.dirs.data / "registry"
        return spawn(
            self.dirs,
            [
                java,
                *JVM_OPTIONS,
                f"-Dquarkus.http.host={HOST}",
                f"-Dquarkus.http.port={self.endpoints.registry_port}",
                "-Dapicurio.storage.kind=sql",
                "-Dapicurio.storage.sql.kind=h2",
                f"-Dapicurio.datasource.url=jdbc:h2:file:{database}",
                "-Dquarkus.log.console.format=%d{yyyy-MM-dd HH:mm:ss} %p [%c{2.}] %m%n",
                "-jar",
                str(self.runner_jar()),
            ],
        )

    def ready(self) -> bool:
        """The ccompat API answers a real request (listing subjects) with 200."""
        answer = request_json("GET", f"{self.endpoint}/subjects")
        return answer is not None and answer.status == 200 and isinstance(answer.body, list)

    def after_ready(self) -> None:
        """Set the global compatibility rule (what Confluent's registry defaults to)."""
        answer = request_json("PUT", f"{self.endpoint}/config", {"compatibility": COMPATIBILITY})
        level = (
            answer.body.get("compatibilityLevel")
            if answer and isinstance(answer.body, dict)
            else None
        )
        if answer is None or answer.status != 200 or level != COMPATIBILITY:
            detail = "no answer" if answer is None else f"HTTP {answer.status}: {answer.body}"
            raise StackError(
                f"apicurio at {self.endpoint}: setting global compatibility {COMPATIBILITY} "
                f"failed ({detail}); see {self.dirs.log_file}"
            )
        log.info("apicurio: global compatibility is %s", COMPATIBILITY)

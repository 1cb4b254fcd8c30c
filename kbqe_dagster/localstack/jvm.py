"""What the JVM services of the local stack (Kafka, Apicurio Registry) share: finding a Java
17+ runtime and Maven, fetching artifacts from Maven Central with Maven, and filling a cache
directory so that an interrupted download never looks like a finished one.

Downloads go through ``mvn`` on purpose: Maven Central is the one source of Java artifacts the
development machines and CI reach, and ``mvn`` honours a developer's ``~/.m2/settings.xml``
(mirrors, proxies) and reuses ``~/.m2/repository`` across checkouts.
"""

from __future__ import annotations

import functools
import logging
import re
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from kbqe_dagster.core.errors import StackError
from kbqe_dagster.localstack.base import ServiceDirs, require_command, spawn

log = logging.getLogger(__name__)

MIN_JAVA = 17
# Named in full so the result does not depend on what the installed Maven binds by default.
# 2.8 on purpose: its `copy` fetches a single artifact without reading the artifact's parent
# pom, whereas the 3.x goals require that pom and fail for Apicurio 3.0.9, whose parent pom
# Maven Central does not serve us. One version for both services keeps first starts short.
DEPENDENCY_PLUGIN = "org.apache.maven.plugins:maven-dependency-plugin:2.8"
MAVEN_TIMEOUT = 900.0
_COMPLETE_MARK = ".complete"
_ANSI = re.compile(r"\x1b\[[0-9;]*m")

_JAVA_HOW_TO_FIX = (
    f"install a Java {MIN_JAVA}+ runtime (Debian/Ubuntu: `apt-get install "
    f"openjdk-{MIN_JAVA}-jdk-headless`) and make sure `java` is on PATH"
)
_MAVEN_HOW_TO_FIX = "install Maven (Debian/Ubuntu: `apt-get install maven`)"

# Maven's local repository has no cross-thread locking in the Maven 3.8 line; the stack starts
# services from threads, so their downloads take turns (launches still overlap).
_MAVEN_LOCK = threading.Lock()


def require_java() -> str:
    """The path of a ``java`` of version MIN_JAVA or newer, or a StackError saying what to do."""
    java = require_command("java", _JAVA_HOW_TO_FIX)
    major = java_major_version(java)
    if major < MIN_JAVA:
        raise StackError(
            f"'{java}' is Java {major}, the local stack needs Java {MIN_JAVA} or newer "
            f"(Kafka 4 brokers require it): {_JAVA_HOW_TO_FIX}"
        )
    return java


@functools.lru_cache(maxsize=8)
def java_major_version(java: str) -> int:
    """The feature version of ``java`` (8 for "1.8.0_392", 17 for "17.0.15")."""
    try:
        out = subprocess.run(
            [java, "-version"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise StackError(f"could not run '{java} -version' ({err}): {_JAVA_HOW_TO_FIX}") from err
    major = parse_java_version(out.stderr + out.stdout)
    if major is None:
        raise StackError(
            f"could not read the Java version from '{java} -version' "
            f"(printed {out.stderr.strip()[:120]!r}): {_JAVA_HOW_TO_FIX}"
        )
    return major


def parse_java_version(text: str) -> int | None:
    match = re.search(r'version "(\d+)(?:\.(\d+))?', text)
    if match is None:
        return None
    first = int(match.group(1))
    # Java 8 and older report "1.<major>".
    return int(match.group(2) or 0) if first == 1 else first


def run_maven(args: Sequence[str], what: str, cwd: Path) -> None:
    """Run ``mvn -q -B <args>`` to download ``what``; a StackError with Maven's first error
    line and the usual fixes when it fails."""
    mvn = require_command("mvn", _MAVEN_HOW_TO_FIX)
    argv = [mvn, "-q", "-B", "-Dstyle.color=never", *args]
    started = time.monotonic()
    log.info("downloading %s from Maven Central (first start only) ...", what)
    with _MAVEN_LOCK:
        try:
            proc = subprocess.run(
                argv,
                cwd=str(cwd),
                capture_output=True,
                text=True,
                timeout=MAVEN_TIMEOUT,
            )
        except subprocess.TimeoutExpired as err:
            raise StackError(
                f"downloading {what} with Maven took longer than {MAVEN_TIMEOUT:.0f}s: check "
                f"that Maven Central is reachable, then run `kbqe stack up` again"
            ) from err
    if proc.returncode != 0:
        raise StackError(
            f"downloading {what} with Maven failed (exit {proc.returncode}): "
            f"{_first_error(proc.stdout + proc.stderr)} — check that Maven Central is "
            f"reachable (or set a mirror in ~/.m2/settings.xml), then run `kbqe stack up` again"
        )
    log.info("downloaded %s in %.1fs", what, time.monotonic() - started)


def _first_error(output: str) -> str:
    plain = _ANSI.sub("", output)  # Maven prints colour resets even in batch mode
    lines = [line.strip() for line in plain.splitlines() if line.strip()]
    errors = [line.removeprefix("[ERROR]").strip() for line in lines if line.startswith("[ERROR]")]
    picked = next((e for e in errors if e), None) or (lines[-1] if lines else "no output")
    return picked[:400]


def install_once(target: Path, fill: Callable[[Path], None]) -> bool:
    """Make ``target`` a finished install: ``fill`` a fresh sibling directory and rename it
    into place, so an interrupted download leaves no half-filled ``target``. Returns False
    (and does nothing) when ``target`` is already complete."""
    if is_complete(target):
        return False
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f"{target.name}.partial-", dir=target.parent))
    try:
        fill(work)
        (work / _COMPLETE_MARK).write_text("ok\n")
        if is_complete(target):  # another process finished first; keep its copy
            return False
        if target.exists():
            shutil.rmtree(target)
        work.rename(target)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


def is_complete(target: Path) -> bool:
    return (target / _COMPLETE_MARK).is_file()


def spawn_java(
    dirs: ServiceDirs,
    java: str,
    options: Sequence[str],
    log4j2: str,
    libs: Path,
    main_class: str,
    *args: str,
) -> int:
    """Start ``main_class`` from the jars in ``libs`` with ``log4j2`` as its logging
    configuration (written to the service's run directory), as the local stack runs every
    JVM service from Maven Central's jars; the pid."""
    config = dirs.run / "log4j2.properties"
    config.write_text(log4j2)
    return spawn(
        dirs,
        [java, *options, f"-Dlog4j2.configurationFile={config}", "-cp", f"{libs}/*",
         main_class, *args],
    )  # fmt: skip

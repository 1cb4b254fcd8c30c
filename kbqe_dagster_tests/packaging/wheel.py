"""Building the project's wheel and installing it, not editable, into a fresh virtual
environment outside the checkout: what a platform team does with it.

Offline and quick (~5 s): the wheel is built without build isolation (the dev extra brings
setuptools and wheel), from a copy of what the build reads, so a stale ``build/`` of the
checkout never leaks into it. The fresh environment gets the wheel with ``--no-deps`` and
sees the project environment's installed dependencies through a ``.pth`` line, after its own
site-packages: the wheel's ``kbqe_dagster`` wins, and the project's editable install is not
loaded (a ``.pth`` file in a directory named by a ``.pth`` line is not processed).
``pip check`` then proves that the dependencies the wheel declares are satisfied, and
deptry (test_packaging.py) that everything the code imports is declared.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kbqe_dagster"
BUILD_FILES = ("pyproject.toml", "setup.cfg", "README.md")
"""What setuptools reads besides the package (README.md is the project's readme)."""


def project_version() -> str:
    return tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]


def build_wheel(workdir: Path) -> Path:
    """``pip wheel`` of a copy of the checkout (the package, its links' targets and the build
    files) into ``workdir/dist``; the wheel's path."""
    source = workdir / "source"
    shutil.copytree(
        PACKAGE,
        source / PACKAGE.name,
        symlinks=True,
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for name in BUILD_FILES:
        shutil.copy2(REPO / name, source / name)
    for link in (PACKAGE / "data").iterdir():  # the user-facing copies the links point to
        target = link.resolve().relative_to(REPO)
        (source / target).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / target, source / target)
    dist = workdir / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "-w",
            str(dist),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("kbqe_dagster-*.whl")
    return wheel


@dataclass(frozen=True)
class FreshVenv:
    """A virtual environment holding the wheel, never the checkout."""

    root: Path

    @property
    def bin(self) -> Path:
        return self.root / "bin"

    @property
    def python(self) -> str:
        return str(self.bin / "python")

    @property
    def kbqe(self) -> str:
        return str(self.bin / "kbqe")

    def pip(self, *args: str) -> subprocess.CompletedProcess:
        # Not the checkout's environment: with the checkout on PYTHONPATH, pip would take
        # its kbqe_dagster for an installed one.
        return subprocess.run(
            [sys.executable, "-m", "pip", "--python", self.python, *args],
            env=outside_env(),
            capture_output=True,
            text=True,
            timeout=300,
        )


def install_wheel(wheel: Path, root: Path) -> FreshVenv:
    subprocess.run(
        [sys.executable, "-m", "venv", "--without-pip", str(root)],
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    )
    venv = FreshVenv(root)
    done = venv.pip(
        "install", "--quiet", "--no-deps", "--no-index", "--force-reinstall", str(wheel)
    )
    assert done.returncode == 0, done.stderr
    site = Path(
        subprocess.run(
            [venv.python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_kbqe_project_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return venv


def outside_env(**extra: str) -> dict[str, str]:
    """The environment of a command run from the fresh venv: nothing that points back at the
    checkout or at the project's interpreter (PySpark's workers would run it)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k
        not in (
            "PYTHONPATH",
            "PYSPARK_PYTHON",
            "PYSPARK_DRIVER_PYTHON",
            "KBQE_PIPELINE_CONFIG",
            "KBQE_STAGING_URL",
            "DAGSTER_HOME",
            "KBQE_CRASH_AT",
            "VIRTUAL_ENV",
        )
    }
    return {**env, **extra}

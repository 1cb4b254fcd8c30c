"""The files the product reads at run time, shipped inside the package, and the checkout it
may run from.

``kbqe_dagster/data/`` holds what the code needs wherever it is installed: the default
pipeline file (``pipeline.yaml``), the local Dagster instance's ``dagster.yaml``, the
``workspace.yaml`` of ``kbqe dev`` and the Maven poms of the local stack's Kafka
(``kafka-pom.xml``) and Kafka Connect worker with its plugins (``connect-*.xml``). In the
repository each is a symbolic link to the user-facing copy (``examples/pipeline.yaml``,
``dagster.yaml``, ``workspace.yaml``, ``stack/kafka/pom.xml``, ``stack/connect/*.xml``),
so there is one source of truth; a wheel carries their content, because setuptools copies
what a link points to. They are found with ``importlib.resources``, never from
``__file__``'s parents, so an installed wheel finds them in site-packages and a checkout in
its tree (the link resolved: the same path as before there was a wheel).

A leaf: imports nothing of the package.
"""

from __future__ import annotations

from importlib import resources
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "kbqe_dagster"
DATA_FILES = (
    "pipeline.yaml",
    "dagster.yaml",
    "workspace.yaml",
    "kafka-pom.xml",
    "connect-pom.xml",
    "connect-plugin-debezium-postgres.xml",
    "connect-plugin-apicurio-converter.xml",
)


def data_file(name: str) -> Path:
    """The packaged file ``kbqe_dagster/data/<name>`` as a real path (links resolved: in a
    checkout, the repository's own copy). Dagster's run workers and ``mvn`` get this path, so
    it must be a file on disk, which it is for every install but a zipped one."""
    if name not in DATA_FILES:
        raise ValueError(f"kbqe_dagster/data/{name}: not a packaged file ({', '.join(DATA_FILES)})")
    resource = resources.files("kbqe_dagster").joinpath("data", name)
    if not isinstance(resource, Path):
        raise RuntimeError(
            f"kbqe_dagster/data/{name} is not a file on disk ({resource!r}): "
            "install the kbqe_dagster wheel unzipped (pip does)"
        )
    return resource.resolve()


def checkout_root() -> Path | None:
    """The repository the package is imported from (``pip install -e .`` or ``PYTHONPATH``),
    or None for an installed wheel: the directory above ``kbqe_dagster/`` holding the
    project's ``pyproject.toml``."""
    package = resources.files("kbqe_dagster")
    if not isinstance(package, Path):
        return None
    root = package.resolve().parent
    return root if (root / "pyproject.toml").is_file() else None


def package_version() -> str:
    """The installed distribution's version (``pip show kbqe_dagster``)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:  # imported from a checkout that was never pip-installed
        return "unknown (kbqe_dagster is not installed: pip install -e .)"

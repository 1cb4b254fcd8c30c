"""Resources by environment for the definitions: built in ``resources/environment.py``, the
one seam through which the package reaches the local stack's endpoints (observability and the
CLI use it too, without importing the definitions)."""

from kbqe_dagster.resources.environment import (
    DEFAULT_PIPELINE,
    ENVIRONMENTS,
    current_environment,
    gcp_resources,
    local_resources,
    pipeline_config_path,
    resources_for_environment,
)

__all__ = [
    "DEFAULT_PIPELINE",
    "ENVIRONMENTS",
    "current_environment",
    "gcp_resources",
    "local_resources",
    "pipeline_config_path",
    "resources_for_environment",
]

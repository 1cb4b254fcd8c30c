"""The documented model of the pipeline file: which class documents which section
(:data:`SECTIONS`) and each field's docstring (:func:`field_docs`), read from the source.

One walk, two outputs: ``scripts/gen_config_reference.py`` writes docs/configuration.md from
it and core/config/schema.py describes every key of the JSON Schema with it, so the reference
and the editor's hover text are the same sentences (STYLE.md §6: each field is documented
where it is declared).
"""

from __future__ import annotations

import ast
import inspect

from kbqe_dagster.core.completeness import decision as completeness
from kbqe_dagster.core.config import erasure
from kbqe_dagster.core.config import sections as config_sections
from kbqe_dagster.core.keyed import contract as keyed
from kbqe_dagster.core.record import enrichment, event_time, partitioning, routing
from kbqe_dagster.core.transforms import destinations
from kbqe_dagster.core.transforms import specs as transform_specs

# (YAML location, class) in the order a reader meets them in a pipeline file. The location
# is a key path (``topics[].routing``, ``tables.<...>``: any key), then two spaces and a
# note; for transforms the note starts with the kind key.
SECTIONS: list[tuple[str, type]] = [
    ("topics[].routing", routing.RoutingConfig),
    (
        "topics[].destinations[]  (instead of routing: one message into several tables)",
        destinations.DestinationConfig,
    ),
    ("topics[].event_time  (defaults: top-level event_time)", event_time.EventTimeConfig),
    ("topics[].keyed  (a keyed destination: changelog, current state, history)", keyed.KeyedConfig),
    ("topics[].transforms[]  add", transform_specs.AddField),
    ("topics[].transforms[]  rename", transform_specs.RenameField),
    ("topics[].transforms[]  drop", transform_specs.DropFields),
    ("topics[].transforms[]  mask", transform_specs.MaskField),
    ("topics[].transforms[]  cast", transform_specs.CastField),
    ("topics[].transforms[]  timestamp", transform_specs.ConvertTimestamp),
    ("topics[].transforms[]  compute", transform_specs.ComputeField),
    ("topics[].transforms[]  function", transform_specs.FunctionTransform),
    ("staging  (per topic: topics[].staging)", config_sections.StagingSettings),
    ("stage_runs  (how due topics share stage runs)", config_sections.StageRunSettings),
    ("completeness  (per topic: topics[].completeness)", completeness.CompletenessSettings),
    ("tables.<dataset.table | dataset.*>", partitioning.TableSettings),
    ("dead_letter", config_sections.DeadLetterDestination),
    ("enrichment", enrichment.EnrichmentConfig),
    ("load", config_sections.LoadSettings),
    ("retention", config_sections.RetentionSettings),
    ("notifications", config_sections.NotificationSettings),
    ("erasure  (a data subject's rows erased across tables)", erasure.ErasureSettings),
    ("erasure.tables.<dataset.table | dataset.*>", erasure.ErasureTable),
    ("erasure.audit", erasure.AuditTable),
]


def field_docs(cls: type) -> list[tuple[str, str, str]]:
    """(name, default as written in the source, docstring) of each annotated field."""
    source = inspect.getsource(cls)
    body = ast.parse(source).body[0].body  # type: ignore[attr-defined]
    out = []
    for i, node in enumerate(body):
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            default = ast.get_source_segment(source, node.value) if node.value else "(required)"
            doc = ""
            following = body[i + 1] if i + 1 < len(body) else None
            if isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant):
                doc = " ".join(str(following.value.value).split())
            out.append((node.target.id, default or "", doc))
    return out


def descriptions(cls: type) -> dict[str, str]:
    """Field name → its docstring, for the documented fields of ``cls``."""
    return {name: doc for name, _, doc in field_docs(cls) if doc}

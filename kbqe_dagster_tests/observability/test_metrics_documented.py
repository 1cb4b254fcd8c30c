"""Every metric the exporter serves is in docs/operations.md's metric tables ("Metrics"), under
the name Prometheus scrapes (counters with ``_total``), and every metric row there is served:
the module docstring of observability/families.py promises "change both together"."""

from __future__ import annotations

import re
from pathlib import Path

import kbqe_dagster.observability.families as families

REPO = Path(__file__).resolve().parents[2]
SERVED = re.compile(r'_(counter|gauge)\(\s*"(kbqe_\w+)"|HistogramMetricFamily\(\s*"(kbqe_\w+)"')


def served() -> set[str]:
    names = set()
    for kind, name, histogram in SERVED.findall(Path(families.__file__).read_text()):
        names.add(histogram or (f"{name}_total" if kind == "counter" else name))
    return names


def documented() -> set[str]:
    text = (REPO / "docs" / "operations.md").read_text()
    section = text.split("### Metrics", 1)[1].split("\n### ", 1)[0]
    return set(re.findall(r"^\| `(kbqe_\w+)` \|", section, flags=re.M))


def test_every_served_metric_is_documented_and_every_documented_one_served() -> None:
    assert len(served()) > 30, "the pattern finds the families"
    assert served() - documented() == set(), "served, not in docs/operations.md"
    assert documented() - served() == set(), "in docs/operations.md, not served"


def test_the_storage_write_bytes_are_served_next_to_the_load_bytes() -> None:
    assert {
        "kbqe_storage_write_bytes_total",
        "kbqe_storage_write_rows_total",
        "kbqe_load_bytes_total",
    } <= served() & documented()

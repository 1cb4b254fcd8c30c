"""``kbqe retention plan``: done files retention would delete, in order, and why the others
stay — the newest range of a partition, anything behind a pending or quarantined file, and
the ranges that bound a hole are kept. Nothing is deleted by the dry run."""

from __future__ import annotations

from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import Area

T = "com.acme.events"


def plan(run: Run, area: Area) -> dict:
    return run("retention", "plan", "--staging", str(area.root), "--json").json()


def test_loaded_done_files_before_the_newest_range_are_deleted_in_order(
    run: Run, area: Area
) -> None:
    assert plan(run, area)["delete"] == [
        f"{T}.3.acme_sales.orders.3.0.9.done",
        f"{T}.3.acme_sales.orders.3.10.19.done",
    ]


def test_every_other_done_file_is_kept_with_its_reason(run: Run, area: Area) -> None:
    report = plan(run, area)
    reasons = {k["name"]: k["reason"] for k in report["kept"]}
    assert report["keep"] == sorted(reasons)
    assert reasons == {
        "com.acme.0.acme_sales.orders.3.0.9.done": "avro_present",
        f"{T}.0.acme_sales.orders.3.0.99.done": "avro_present",
        f"{T}.0.acme_sales.orders.4.0.99.done": "behind_kept",
        f"{T}.0.acme_sales.orders.3.100.199.done": "behind_kept",
        f"{T}.0.acme_web.page_views.5.200.299.done": "avro_present",
        f"{T}.1.acme_sales.orders.3.0.49.done": "avro_present",
        f"{T}.1.acme_sales.orders.4.0.49.done": "avro_present",
        f"{T}.1.kbqe_dead_letters.dead_letters.0.0.49.done": "avro_present",
        f"{T}.2.acme_sales.orders.3.0.9.done": "newest",
        f"{T}.2.acme_sales.orders.3.20.29.done": "after_hole",
        f"{T}.3.acme_sales.orders.3.20.29.done": "newest",
    }


def test_the_dry_run_deletes_nothing(run: Run, area: Area) -> None:
    before = sorted(p.name for p in area.root.iterdir())
    result = run("retention", "plan", "--staging", str(area.root))
    assert result.code == 0
    assert sorted(p.name for p in area.root.iterdir()) == before
    lines = result.out.splitlines()
    assert lines[0].endswith("(dry run, nothing deleted): delete 2, keep 11")
    assert lines[lines.index("delete, in this order:") + 1] == (
        f"  {T}.3.acme_sales.orders.3.0.9.done"
    )

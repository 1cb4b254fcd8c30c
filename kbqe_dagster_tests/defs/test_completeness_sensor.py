"""``completeness_sensor`` under Dagster's sensor context: it declares the days that became
complete once (one passed ``day_complete`` per day, on the table asset's partition), keeps
the state in the staging area, and skips when nothing changed. Kafka's watermarks and the
clock are fixed; the staging area is real files."""

from __future__ import annotations

from datetime import date, datetime
from pathlib import Path

import dagster as dg
import pytest
import yaml

from kbqe_dagster.defs.completeness import sensors
from kbqe_dagster.defs.completeness.checks import DAY_COMPLETE
from kbqe_dagster.operations.completeness import read_state
from kbqe_dagster.resources.configurable import KafkaResource, PipelineResource, StagingResource
from kbqe_dagster_tests.operations import completeness_area as area

CAUGHT_UP = {("orders", 0): (0, 20), ("orders", 1): (0, 20), ("clicks", 0): (0, 0)}


class FixedClock(datetime):
    @classmethod
    def now(cls, tz=None):
        return area.NOW


@pytest.fixture
def setup(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    store = area.build(tmp_path / "staging")
    pipeline = tmp_path / "pipeline.yaml"
    pipeline.write_text(yaml.safe_dump(area.PIPELINE))
    marks = {"now": area.WATERMARKS}
    monkeypatch.setattr(
        sensors, "watermarks_of", lambda settings, topics: area.watermarks(marks["now"])(topics)
    )
    monkeypatch.setattr(sensors, "datetime", FixedClock)
    resources = {
        "pipeline": PipelineResource(config_path=str(pipeline)),
        "kafka": KafkaResource(bootstrap_servers="127.0.0.1:1"),
        "staging": StagingResource(url=str(tmp_path / "staging")),
    }
    with dg.instance_for_test() as instance:
        yield instance, resources, store, marks


def tick(instance, resources) -> dg.SensorResult:
    return sensors.completeness_sensor(
        dg.build_sensor_context(instance=instance, resources=resources)
    )


def test_a_newly_complete_day_is_reported_once_on_its_partition(setup):
    instance, resources, store, marks = setup
    (event,) = tick(instance, resources).asset_events
    assert (event.asset_key, event.check_name, event.partition, event.passed) == (
        dg.AssetKey(["bigquery", "shop", "orders"]),
        DAY_COMPLETE,
        "2026-11-22",
        True,
    )
    assert event.metadata["held_back_by"].value[0]["partition"] == 1
    assert read_state(store).tables["shop.orders"].newest_complete == date(2026, 11, 22)
    assert tick(instance, resources).skip_reason is not None, "nothing new: nothing reported"

    store.delete(area.PENDING)  # orders[1] loaded and caught up: 11-23 completes
    marks["now"] = CAUGHT_UP
    result = tick(instance, resources)
    assert [(e.partition, e.passed) for e in result.asset_events] == [("2026-11-23", True)]
    assert result.asset_events[0].metadata["late_after_complete"].value == 3

"""Debezium change streams written by Kafka Connect's JsonConverter (schema embedded in every key
and value, nothing in the registry) into current-state tables and SCD type II history, end to
end: real Kafka, fake GCS, the BigQuery emulator and Spark, driven by ``kbqe run --until-idle``.

The same rig and oracle as test_debezium_on_local_stack.py (kbqe_dagster/demo/debezium.py), with
the events encoded as JSON: snapshot reads, inserts, updates, deletes with their tombstones, a
key re-created in the delete's millisecond, redelivered duplicates, an out-of-order version; a
column added (schema v2) together with a newer envelope; then the Avro converter's messages on
the same topics (a topic may mix both); then a run with nothing new. The key columns come from
the Kafka key's embedded schema while the registry has no key subject for the topics.
"""

from __future__ import annotations

import pytest

from kbqe_dagster.demo.debezium import MODES, CustomersTable, KeyedRig
from kbqe_dagster_tests.support.keyed_oracle import assert_tables_equal_the_oracle, run_until_idle

# Four and more `kbqe run`s of Spark each: minutes on two shared cores. The timeout is a
# hang guard, not a speed bound (bench/ measures speed); 600 s was reached at load 11.
pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

PARTITIONS = 3


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = KeyedRig.create(local_endpoints, tmp_path, partitions=PARTITIONS, encoding="json")
    yield rig
    rig.remove()


def test_json_converter_changes_land_as_current_state_and_history(rig) -> None:
    table = CustomersTable(seed=17, partitions=PARTITIONS)

    # Round 1: a snapshot, then live changes of schema v1, as JsonConverter writes them.
    table.snapshot(25)
    table.round(inserts=10, updates=12, deletes=4)
    rig.topics.produce(table)
    report = run_until_idle(rig)
    assert report["ok"] is True
    tombstones = sum(1 for c in table.changes if c.is_tombstone)
    for mode in MODES:
        topic = report["topics"][rig.by_mode[mode]]
        assert topic["tombstones"] == tombstones
        assert topic["dead_lettered"] == 0
        assert topic["staged"] == len(table.changes) - tombstones
    assert_tables_equal_the_oracle(rig)

    # Round 2: a column added and a newer envelope (ts_us, ts_ns): new Connect schemas.
    table.schema_version = 2
    table.round(inserts=8, updates=10, deletes=4)
    rig.topics.produce(table, ts_precision=True)
    report = run_until_idle(rig)
    assert report["ok"] is True
    assert all(report["topics"][rig.by_mode[m]]["dead_lettered"] == 0 for m in MODES)
    assert_tables_equal_the_oracle(rig)

    # Round 3: the Avro converter's messages on the same topics.
    rig.topics.encoding = "avro"
    table.round(inserts=5, updates=8, deletes=3)
    rig.topics.produce(table)
    report = run_until_idle(rig)
    assert report["ok"] is True
    assert all(report["topics"][rig.by_mode[m]]["dead_lettered"] == 0 for m in MODES)
    assert_tables_equal_the_oracle(rig)

    # Round 4: nothing new: nothing staged, nothing merged, the tables unchanged.
    before = {m: sorted(rig.current_rows(m), key=repr) for m in MODES}
    report = run_until_idle(rig)
    assert report["ok"] is True
    for mode in MODES:
        assert report["topics"][rig.by_mode[mode]]["staged"] == 0
        assert sorted(rig.current_rows(mode), key=repr) == before[mode]
    assert_tables_equal_the_oracle(rig)

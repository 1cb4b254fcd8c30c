"""Erasure of a keyed topic's subject on the local stack: Debezium changes merged into the
current state ``D.T`` (soft and hard deletes), its changelog and its history view. After
``kbqe erase`` no row of the subject is left in any of the three, the other keys are as they
were, and a later round merges with the keyed checks passing."""

from __future__ import annotations

import json
import subprocess

import pytest
import yaml

from kbqe_dagster.demo.debezium import MODES, CustomersTable, KeyedRig

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PARTITIONS = 2


@pytest.fixture
def rig(local_stack, local_endpoints, tmp_path):
    rig = KeyedRig.create(local_endpoints, tmp_path, partitions=PARTITIONS)
    path = rig.env["KBQE_PIPELINE_CONFIG"]
    with open(path) as f:
        pipeline = yaml.safe_load(f)
    pipeline["erasure"] = {
        "tables": {f"{rig.dataset}.customers_{mode}": {"columns": ["id"]} for mode in MODES},
        "audit": {"dataset": f"{rig.dataset}_audit", "table": "requests"},
    }
    with open(path, "w") as f:
        yaml.safe_dump(pipeline, f)
    rig.env["KBQE_ERASURE_SALT"] = "keyed-test-salt"
    yield rig
    rig.client.delete_dataset(f"{rig.dataset}_audit", delete_contents=True, not_found_ok=True)
    rig.remove()


def count(rig: KeyedRig, table: str, subject: int) -> int:
    sql = f"SELECT COUNT(*) n FROM `{rig.dataset}.{table}` WHERE id = {subject}"
    return next(iter(rig.client.query(sql).result()))["n"]


def test_an_erased_key_leaves_no_row_in_current_state_changelog_or_history(rig) -> None:
    table = CustomersTable(seed=7, partitions=PARTITIONS)
    table.snapshot(12)
    table.round(inserts=4, updates=10, deletes=2)
    rig.topics.produce(table)
    done = rig.run_until_idle()
    assert done.returncode == 0, done.stderr[-3000:]
    live = {row[0] for row in rig.current_rows("soft") if not row[7]}  # not _deleted
    subject = min(live)
    before = {m: sorted(r for r in rig.current_rows(m) if r[0] != subject) for m in MODES}
    for mode in MODES:
        for suffix in ("", "_changelog", "_history"):
            assert count(rig, f"customers_{mode}{suffix}", subject) > 0

    erased = subprocess.run(
        [rig.kbqe, "erase", "--subject", str(subject), "--request-id", "k-1", "--json"],
        env=rig.env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert erased.returncode == 0, erased.stderr[-3000:]
    report = json.loads(erased.stdout)
    assert report["requests"][0]["status"] == "complete"
    assert {t["table"] for t in report["tables"]} == {
        f"{rig.dataset}.customers_{mode}{suffix}" for mode in MODES for suffix in ("", "_changelog")
    }
    for mode in MODES:
        for suffix in ("", "_changelog", "_history"):
            assert count(rig, f"customers_{mode}{suffix}", subject) == 0, (mode, suffix)
        assert sorted(rig.current_rows(mode)) == before[mode]

    # More changes: the merge goes on, and its checks (keys_unique, matches_changelog: the
    # current state recomputed from the changelog the erasure thinned) pass: exit code 0.
    table.round(inserts=3, updates=6, deletes=1)
    rig.topics.produce(table)
    done = rig.run_until_idle()
    assert done.returncode == 0, done.stderr[-3000:]

"""A keyed rig's ``kbqe run --until-idle`` that must succeed, and the assertion that its current and
history tables equal the oracle's (the source rows the rig changed): what the Debezium tests over
Avro and JSON share."""

from __future__ import annotations

import json

from kbqe_dagster.demo.debezium import MODES, KeyedRig, wrong


def run_until_idle(rig: KeyedRig) -> dict:
    done = rig.run_until_idle()
    assert done.returncode == 0, done.stderr[-3000:] + done.stdout[-2000:]
    return json.loads(done.stdout)


def assert_tables_equal_the_oracle(rig: KeyedRig) -> None:
    differences = rig.differences()
    assert wrong(differences) == 0, differences
    for mode in MODES:
        assert differences[mode]["current_rows"] > 0 and differences[mode]["history_rows"] > 0

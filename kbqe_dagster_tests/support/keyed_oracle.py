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


def stage_run_metadata(dagster_home: str) -> list[dict]:
    """The metadata of every stage run's ``staging`` materialization in the instance at
    ``dagster_home`` (what ``kbqe run`` reports per run), values unwrapped."""
    import dagster as dg

    from kbqe_dagster.core.stage_runs import report_keys as stage_report

    out = []
    with dg.DagsterInstance.from_config(dagster_home) as instance:
        for key in instance.get_asset_keys():
            records = instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=key), limit=100
            ).records
            for record in records:
                md = {k: getattr(v, "value", v)
                      for k, v in record.asset_materialization.metadata.items()}  # fmt: skip
                if stage_report.STAGE_PATH in md:
                    out.append(md)
    return out


def kernel_hand_backs(rig: KeyedRig) -> dict[str, tuple[int, int]]:
    """Per mode: the messages the rig's stage runs read of its topic and how many of them the
    native kernel handed back to the Python path (the runs' ``by_topic`` metadata)."""
    from kbqe_dagster.core.stage_runs import report_keys as stage_report

    totals = {mode: (0, 0) for mode in rig.by_mode}
    modes = {topic: mode for mode, topic in rig.by_mode.items()}
    for md in stage_run_metadata(rig.env["DAGSTER_HOME"]):
        for topic, share in (md.get(stage_report.BY_TOPIC) or {}).items():
            if topic in modes:
                messages, back = totals[modes[topic]]
                handed = sum((share.get(stage_report.KERNEL_HANDBACKS) or {}).values())
                totals[modes[topic]] = (messages + share[stage_report.MESSAGES], back + handed)
    return totals

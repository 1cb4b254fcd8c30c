"""``kbqe bootstrap``: markers that make partitions start at given offsets, read back by the
same recovery the stage job uses. Forward only, all-or-nothing, idempotent."""

from __future__ import annotations

import json

import pytest

from kbqe_dagster.core.protocol.commit import parse_manifest
from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import Area

T = "com.acme.events"


def next_offsets(run: Run, area: Area) -> dict[tuple[str, int], int]:
    report = run("staging", "status", "--staging", str(area.root), "--json").json()
    return {(p["topic"], p["partition"]): p["next_offset"] for p in report["partitions"]}


def test_markers_make_the_partitions_resume_at_the_given_offsets(run: Run, area: Area) -> None:
    report = run(
        "bootstrap",
        "--topic",
        "com.acme",
        "--offsets",
        "0=2787665,1=2828379",
        "--staging",
        str(area.root),
        "--json",
    ).json()
    assert [
        (p["partition"], p["next_offset"], p["previous_next_offset"], p["written"])
        for p in report["partitions"]
    ] == [(0, 2787665, 10, True), (1, 2828379, None, True)]
    assert report["partitions"][0]["skipped_offsets"] == 2787655
    marker = "com.acme.0._kbqe.bootstrap.0.2787664.2787664.done"
    assert report["partitions"][0]["marker"] == marker
    manifest = parse_manifest((area.root / marker).read_bytes(), marker)
    assert (manifest.topic, manifest.partition, manifest.first, manifest.files) == (
        "com.acme",
        0,
        2787664,
        (),
    )
    offsets = next_offsets(run, area)
    assert offsets[("com.acme", 0)] == 2787665
    assert offsets[("com.acme", 1)] == 2828379
    assert offsets[(T, 0)] == 300  # com.acme.events starts with "com.acme." but is untouched


def test_running_it_twice_writes_once(run: Run, area: Area) -> None:
    args = ("bootstrap", "--topic", T, "--offsets", "3=1000", "--staging", str(area.root))
    assert run(*args, "--json").json()["partitions"][0]["written"] is True
    again = run(*args)
    assert again.code == 0
    assert again.out.strip() == f"{T}[3]: already resumes at 1000; nothing written"
    assert len(list(area.root.glob("*._kbqe.bootstrap.*"))) == 1


@pytest.mark.parametrize(
    ("offsets", "message"),
    [
        (
            "3=1000,0=100",
            f"kbqe: error: {T}[0]: offsets up to 299 are already committed, so a "
            "bootstrap at 100 would change nothing",
        ),
        ("0=0", f"kbqe: error: {T}[0]: offset 0 cannot be bootstrapped"),
        ("0:5", "kbqe: error: --offsets: '0:5' is not PARTITION=OFFSET"),
        ("1=5,1=6", "kbqe: error: --offsets: partition 1 is given twice"),
        ("0=-3", "kbqe: error: --offsets: '0=-3' is not PARTITION=OFFSET"),
    ],
)
def test_a_refused_request_is_one_error_line_and_writes_nothing(
    run: Run, area: Area, offsets: str, message: str
) -> None:
    before = sorted(p.name for p in area.root.iterdir())
    result = run("bootstrap", "--topic", T, "--offsets", offsets, "--staging", str(area.root))
    assert result.code == 1
    assert result.out == ""
    assert len(result.err.splitlines()) == 1
    assert result.err.startswith(message)
    assert sorted(p.name for p in area.root.iterdir()) == before


def test_an_illegal_topic_name_is_refused(run: Run, area: Area) -> None:
    result = run(
        "bootstrap", "--topic", "bad topic", "--offsets", "0=5", "--staging", str(area.root)
    )
    assert (result.code, result.err.strip()) == (
        1,
        "kbqe: error: --topic: 'bad topic' is not a legal Kafka topic name",
    )


def test_the_text_report_says_what_was_skipped(run: Run, area: Area) -> None:
    result = run("bootstrap", "--topic", T, "--offsets", "2=15", "--staging", str(area.root))
    assert result.out.splitlines() == [
        f"{T}[2]: resumes at 15 (was 10, skips 5 offset(s)); "
        f"wrote {T}.2._kbqe.bootstrap.0.14.14.done",
    ]
    marker = area.root / f"{T}.2._kbqe.bootstrap.0.14.14.done"
    assert json.loads(marker.read_text())["first"] == 14

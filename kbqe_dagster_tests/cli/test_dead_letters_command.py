"""``kbqe dead-letters``: the dead-letter records of committed files still in the staging
area, counted per reason, filtered by reason/topic, limited, with previews of raw bytes."""

from __future__ import annotations

from kbqe_dagster_tests.cli.conftest import Run
from kbqe_dagster_tests.cli.staging_area import DEAD_P1, Area

T = "com.acme.events"


def letters(run: Run, area: Area, *extra: str) -> dict:
    return run("dead-letters", "--staging", str(area.root), "--json", *extra).json()


def test_records_are_listed_in_offset_order_with_reason_error_and_source(
    run: Run, area: Area
) -> None:
    report = letters(run, area)
    assert report["table"] == "kbqe_dead_letters.dead_letters"
    assert report["files"] == [DEAD_P1]
    assert report["counts_by_reason"] == {"bad_magic": 2, "tombstone": 1, "too_short": 1}
    assert [
        (r["topic"], r["partition"], r["offset"], r["reason"], r["error"])
        for r in report["records"]
    ] == [
        (T, 1, 3, "bad_magic", "byte 0 is 0x01, not 0x00"),
        (T, 1, 7, "too_short", "2 bytes, shorter than the 5-byte header"),
        (T, 1, 9, "bad_magic", "byte 0 is 0x70"),
        (T, 1, 11, "tombstone", "the value is null"),
    ]


def test_raw_values_are_previewed_as_hex_and_as_text_when_printable(run: Run, area: Area) -> None:
    records = {r["offset"]: r for r in letters(run, area)["records"]}
    assert records[3]["value"] == {
        "size": 9,
        "hex": "0100000003626f6479",
        "text": None,
        "truncated": False,
    }
    text_value = b"plain text, not avro at all: hello world!"
    assert records[9]["value"] == {
        "size": len(text_value),
        "hex": text_value[:32].hex(),
        "text": text_value[:32].decode(),
        "truncated": True,
    }
    assert records[11]["value"] is None
    assert records[3]["key"]["text"] == "bad"
    assert records[3]["header_keys"] == ["trace"]


def test_reason_filter_and_limit_keep_the_counts_of_everything(run: Run, area: Area) -> None:
    report = letters(run, area, "--reason", "bad_magic", "--limit", "1")
    assert [r["offset"] for r in report["records"]] == [3]
    assert (report["matching"], report["truncated"]) == (2, True)
    assert report["counts_by_reason"] == {"bad_magic": 2, "tombstone": 1, "too_short": 1}


def test_a_topic_filter_without_dead_letters_finds_none(run: Run, area: Area) -> None:
    report = letters(run, area, "--topic", "com.acme")
    assert (report["files"], report["records"], report["counts_by_reason"]) == ([], [], {})


def test_an_uncommitted_dead_letter_file_is_not_read(run: Run, area: Area) -> None:
    for done in area.root.glob(f"{T}.1.*.done"):
        done.unlink()
    assert letters(run, area)["files"] == []


def test_the_text_report_shows_counts_and_each_record(run: Run, area: Area) -> None:
    result = run("dead-letters", "--staging", str(area.root), "--limit", "2")
    lines = result.out.splitlines()
    assert f"{T}[1] offset 3  bad_magic  staged 2024-09-13T12:00:00+00:00" in lines
    assert "    value: 9 byte(s)  hex 0100000003626f6479" in lines
    assert lines[-1] == "showing 2 of 4 (raise --limit, or --json)"

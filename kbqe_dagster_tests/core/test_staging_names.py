"""Staging file names: the original project's convention, parsed from the right."""

from __future__ import annotations

import pytest

from kbqe_dagster.core.protocol.naming import (
    AvroFileName,
    DoneFileName,
    FileKey,
    parse_listing,
    parse_name,
)


@pytest.mark.parametrize(
    "name, expected",
    [
        (
            "events.3.sales.orders.12.1000.avro",
            AvroFileName(FileKey("events", 3, "sales", "orders", 12, 1000)),
        ),
        (
            "events.3.sales.orders.12.1000.1999.done",
            DoneFileName(FileKey("events", 3, "sales", "orders", 12, 1000), 1999),
        ),
        (
            "com.acme.events.0.acme_web.page_views.7.0.avro",
            AvroFileName(FileKey("com.acme.events", 0, "acme_web", "page_views", 7, 0)),
        ),
        (
            "gs://bucket/prefix/com.acme.events.0.acme_web.page_views.7.0.41.done",
            DoneFileName(FileKey("com.acme.events", 0, "acme_web", "page_views", 7, 0), 41),
        ),
        (
            "t-1_x.11.ds.tbl-with-dash.0.5.5.done",
            DoneFileName(FileKey("t-1_x", 11, "ds", "tbl-with-dash", 0, 5), 5),
        ),
    ],
)
def test_valid_names_parse_from_the_right(name: str, expected: object) -> None:
    assert parse_name(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "events.3.sales.orders.12.1000.parquet",  # not our suffix
        "3.sales.orders.12.1000.avro",  # no topic left
        "events.x.sales.orders.12.1000.avro",  # partition not a number
        "events.3.sales.orders.-1.1000.avro",  # negative schema id
        "events.3.sales.orders.12.01000.avro",  # leading zero: not how we write numbers
        "events.3.sales.orders.12.1000.999.done",  # last before first
        "events.3.sal-es.orders.12.1000.avro",  # dash is not legal in a dataset id
        "ev ents.3.sales.orders.12.1000.avro",  # space is not legal in a topic
        "_kbqe/load_state.json",
        "",
    ],
)
def test_names_that_do_not_parse_are_not_ours(name: str) -> None:
    assert parse_name(name) is None


def test_names_round_trip_through_their_string_form() -> None:
    key = FileKey("com.acme.events", 2, "acme_sales", "orders", 3, 4200)
    avro = AvroFileName(key)
    done = avro.done(4299)
    assert parse_name(avro.name) == avro
    assert parse_name(done.name) == done
    assert done.avro == avro
    assert done.next_offset == 4300


def test_done_file_matches_its_avro_file_on_the_full_key_including_schema_id() -> None:
    first = parse_name("t.0.d.x.1.100.199.done")
    other_schema = parse_name("t.0.d.x.2.100.avro")
    same = parse_name("t.0.d.x.1.100.avro")
    assert isinstance(first, DoneFileName)
    assert first.avro == same
    assert first.avro != other_schema


def test_listing_sorts_files_and_reports_unrecognized_names_without_failing() -> None:
    listing = parse_listing(
        ["t.0.d.x.1.100.avro", "README.txt", "t.0.d.x.1.100.199.done", "t.0.d.x.1.0.avro"]
    )
    assert [a.key.first_offset for a in listing.avro] == [0, 100]
    assert [d.name for d in listing.done] == ["t.0.d.x.1.100.199.done"]
    assert listing.unrecognized == ("README.txt",)


def test_invalid_keys_are_refused_when_built_in_code() -> None:
    with pytest.raises(ValueError, match="dataset"):
        FileKey("t", 0, "a.b", "x", 1, 0)
    with pytest.raises(ValueError, match="before its first offset"):
        DoneFileName(FileKey("t", 0, "d", "x", 1, 10), 9)


def test_a_trailing_newline_does_not_sneak_into_a_name() -> None:
    assert parse_name("events\n.3.sales.orders.12.1000.avro") is None
    with pytest.raises(ValueError):
        FileKey("events\n", 0, "d", "x", 1, 0)

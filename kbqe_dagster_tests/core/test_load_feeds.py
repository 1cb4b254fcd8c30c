"""Which staging area feeds a table with a topic (core/load/feeds.py): the labels and the rule."""

from __future__ import annotations

import re

import pytest

from kbqe_dagster.core.load.feeds import (
    FEED_LABEL_PREFIX,
    MAX_TABLE_LABELS,
    feed_conflicts,
    feed_label_key,
    feed_label_value,
    labels_to_add,
    staging_area_id,
)

LABEL = re.compile(r"[a-z][a-z0-9_-]{0,62}")
VALUE = re.compile(r"[a-z0-9_-]{0,63}")
RAWDEMO = "gs://kbqe-local/rawdemo-1795767661"
STAGING = "gs://kbqe-local/staging"


@pytest.mark.parametrize(
    "url",
    [
        RAWDEMO,
        STAGING,
        "gs://Bucket.With.Dots/Some/Deep/Prefix/" + "x" * 200,
        "/data/kbqe-staging",
        "relative/dir",
    ],
)
def test_labels_follow_bigquerys_rules(url) -> None:
    assert LABEL.fullmatch(feed_label_key("com.acme.Events_v2")), "a key starts with a letter"
    assert VALUE.fullmatch(feed_label_value(url))


def test_the_value_is_readable_and_names_the_staging_area() -> None:
    assert feed_label_value(RAWDEMO).startswith("gs-kbqe-local-rawdemo-1795767661-")
    assert feed_label_value("/data/kbqe-staging").startswith("data-kbqe-staging-")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("gs://a/b-c", "gs://a-b/c"),  # the same readable form
        ("gs://kbqe-local/STAGING", "gs://kbqe-local/staging"),  # GCS names are case-sensitive
        ("gs://b/" + "p" * 80 + "1", "gs://b/" + "p" * 80 + "2"),  # past the readable part
    ],
)
def test_two_staging_areas_never_share_a_value(a, b) -> None:
    assert feed_label_value(a) != feed_label_value(b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("gs://kbqe-local/staging", "gs://kbqe-local/staging/"),
        ("/data/kbqe-staging", "/data/./kbqe-staging/"),
    ],
)
def test_one_staging_area_spelled_two_ways_is_one(a, b) -> None:
    assert staging_area_id(a) == staging_area_id(b)
    assert feed_label_value(a) == feed_label_value(b)


def test_topics_get_distinct_keys_under_the_prefix() -> None:
    keys = {feed_label_key(t) for t in ("com.acme.events", "com.acme.Events", "com-acme-events")}
    assert len(keys) == 3 and all(k.startswith(FEED_LABEL_PREFIX) for k in keys)


def test_a_topic_labelled_with_another_staging_area_conflicts_naming_both() -> None:
    labels = {feed_label_key("com.acme.events"): feed_label_value(RAWDEMO), "team": "sales"}

    (conflict,) = feed_conflicts(
        labels, "acme_sales.orders", ["com.acme.events", "com.acme.events"], STAGING
    )

    assert (conflict.table, conflict.topic) == ("acme_sales.orders", "com.acme.events")
    assert conflict.theirs == feed_label_value(RAWDEMO) and conflict.ours == STAGING
    message = conflict.message
    assert "table acme_sales.orders is fed with topic com.acme.events" in message
    assert feed_label_value(RAWDEMO) in message and STAGING in message
    assert f"--remove_label {feed_label_key('com.acme.events')} acme_sales.orders" in message
    assert "kbqe load release --table acme_sales.orders" in message


@pytest.mark.parametrize(
    "labels",
    [
        None,  # the table does not exist yet
        {},
        {"team": "sales"},  # loaded before the guard
        {feed_label_key("com.acme.events"): feed_label_value(STAGING)},  # ours
        {feed_label_key("com.acme.other"): feed_label_value(RAWDEMO)},  # another topic
    ],
)
def test_no_conflict_without_another_staging_areas_label_for_the_topic(labels) -> None:
    assert feed_conflicts(labels, "acme_sales.orders", ["com.acme.events"], STAGING) == []


def test_labels_to_add_only_the_missing_topics_and_never_overwrite() -> None:
    labels = {
        feed_label_key("a"): feed_label_value(STAGING),
        feed_label_key("b"): feed_label_value(RAWDEMO),
    }

    add, unguarded = labels_to_add(labels, ["a", "b", "c"], STAGING)

    assert add == {feed_label_key("c"): feed_label_value(STAGING)} and unguarded == []


def test_a_table_at_bigquerys_label_limit_leaves_new_topics_unguarded() -> None:
    labels = {f"l{i}": "x" for i in range(MAX_TABLE_LABELS - 1)}

    add, unguarded = labels_to_add(labels, ["a", "b", "c"], STAGING)

    assert add == {feed_label_key("a"): feed_label_value(STAGING)}
    assert unguarded == ["b", "c"]

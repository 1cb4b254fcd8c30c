"""The names of what a stage run reports on the ``staging`` asset's materialization: written by
``defs/staging/metadata.py``, read back by the metrics (``observability/event_totals.py``) and by
``kbqe run``'s report (``runner/in_process.py``). One spelling for all three, so a key renamed in
the writer cannot leave a reader counting zeros.

A single topic's run reports the per-topic keys; a grouped run the same keys summed over its
topics, plus :data:`TOPICS` and :data:`BY_TOPIC` (each topic's plain totals, under the same keys).
"""

TOPIC = "topic"
"""The topic of a single-topic run (absent on a grouped run's totals)."""
TOPICS = "topics"
"""The topics a run was asked to stage."""
BY_TOPIC = "by_topic"
"""Per topic staged, its share of the run (:func:`defs.staging.metadata.topic_totals`)."""
MISSING_TOPICS = "missing_topics"
"""Topics Kafka no longer holds (deleted since the sensor's tick): not staged."""
YIELDED = "yielded"
"""Topics left to an older stage run in flight."""

ROWS = "dagster/row_count"
"""Records staged (Dagster's own row-count key, shown in the UI)."""
MESSAGES = "messages"
BYTES_WRITTEN = "bytes_written"
BYTES_WRITTEN_BY_DATASET = "bytes_written_by_dataset"
STORAGE_WRITE_BY_TABLE = "storage_write_by_table"
"""``dataset.table`` → rows, bytes and list price appended through the Storage Write API."""
FILES_WRITTEN = "files_written"
RANGES = "ranges"
"""The offset ranges committed."""
DEAD_LETTERS = "dead_letters"
DEAD_LETTERS_BY_REASON = "dead_letters_by_reason"
SKIPPED_BY_REASON = "skipped_by_reason"
TOMBSTONES = "tombstones"
"""Keyed topics: null values counted, never dead-lettered (present only when non-zero)."""
STAGE_PATH = "stage_path"
"""The native kernel or the Python path (``+``-joined when both ran)."""
KAFKA_READER = "kafka_reader"
KERNEL_HANDBACKS = "kernel_handbacks"
ORPHANS_DELETED = "orphans_deleted"
ROLLED_FORWARD = "rolled_forward"
UNRECOGNIZED_FILES = "unrecognized_files"
LOST_OFFSETS = "lost_offsets"
SECONDS = "seconds"

"""The stage engine: Kafka offset ranges → record files + done files in the staging area.

Driver side: ``prepare.py`` (roll committed ranges forward, delete crash leftovers, plan
ranges), ``backlog.py`` (every topic's backlog for the sensor), ``job.py`` (the ranges as an
RDD on a SparkContext, a summary for Dagster to report), ``stage_loop.py`` (the stage loop: one
long run staging its topics round after round, an idle round costing one watermarks read).

Executor side, one module per concern: ``task.py`` (``stage_range``: one range, read, staged,
committed), ``context.py`` (``StageContext`` shipped to the tasks, ``RangeResult`` returned),
``stager.py`` (``RangeStager``: the per-message reference path and the public interface its
extensions build on), ``range_sink.py`` (where a range's records go: the ``RangeSink`` interface)
with ``staging_area_sink.py`` (Avro files + done files: the range commit protocol) and
``open_file.py`` (one avro file of a range), ``workdirs.py`` (the tasks' local directories),
``native_kernel.py`` (the optional native kernel's host), ``probe/`` (the record probe),
``avro_container.py`` and ``avro_binary.py`` (Avro container files and zig-zag longs, shared
with ``keyed/avro_skip.py``).

May import ``core/``, ``resources/`` and ``faults.py``. Never imports its extensions
(``formats/``, ``keyed/``) nor the seam that chooses among them (``kbqe_dagster/stager_registry.py``):
the driver ships the choice in the ``StageContext``. Never imports ``loading/``, ``defs/``,
``runner/``.
"""

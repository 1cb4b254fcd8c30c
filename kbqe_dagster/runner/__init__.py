"""``kbqe run --until-idle``: the pipeline's own jobs run in this process until nothing is left.

What the daemon does over minutes — ``kafka_backlog_sensor`` launching ``stage_job``, the
``load_cycle`` and ``poll_load_jobs`` schedules — done now, round after round, for an operator,
a script or a test. The jobs are the very job definitions of ``definitions.py`` executed
in-process against the Dagster instance, so every run, materialization and check shows in the
UI as if the daemon had launched it.

Its own package rather than ``operations/`` (read-only reports over a staging store) or
``defs/`` (wiring, no logic): it is a driver of jobs, with a loop worth testing on its own.

- ``until_idle.py``: the loop and its stop decisions, over a :class:`Pipeline` protocol (no
  Dagster import: unit-tested with a fake pipeline);
- ``after_load.py``: the contract of the steps run after each round's loads;
  ``after_load_steps.py``: those steps, in order (``AFTER_LOAD_STEPS``: the keyed tables' MERGE,
  erasure);
- ``report.py``: what a run did, per topic and per table, as text and as JSON;
- ``in_process.py``: the :class:`Pipeline` that executes the Dagster jobs;
- ``erasure_step.py`` and ``keyed_merge.py``: the after-load steps of erasure and keyed tables.

The ``kbqe run`` sub-command (arguments and output) is ``cli/run.py``.

May import core/, resources/, staging/, loading/, keyed/, formats/, operations/, defs/,
definitions.py and processes.py; never the demo or the CLI."""

"""Operator operations behind the ``kbqe`` command: plain functions over a staging store that
return report dataclasses (with a ``to_json()`` for ``--json``). They decide nothing new —
every decision is the one ``core/`` makes for the stage and load jobs, so a dry run shows
exactly what a real run would do. Rendering for humans lives in ``kbqe_dagster/cli/``.

May import core/, resources/ and loading/; never defs/, the demo or the CLI."""

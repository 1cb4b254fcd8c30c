"""Demo data: realistic sample events for the local stack and producing them (``kbqe demo``,
``kbqe produce-sample``), also used by the end-to-end tests as the known input whose every
offset must arrive once.

May import core/, resources/, loading/, localstack/, defs/ and definitions.py; never the CLI."""

"""Per-record transforms and one message into several tables (DESIGN.md §10): the specs of
the pipeline file (``specs.py``), what each kind does (``kinds.py``, ``values.py``), the chain
compiled once per input schema (``compiler.py``) and the destinations of one topic
(``destinations.py``).

May import the top of ``core/``, ``formats/`` and ``record/``. No re-exports here.
"""

"""The BigQuery side (DESIGN.md §4): which files go into which load job (``selection.py``),
the state file (``state.py``) and a job's life in it (``lifecycle.py``), what waits for a
load (``pending.py``), the load checks (``checks.py``) and the schema notices
(``notices.py``).

May import the top of ``core/`` and ``protocol/``. No re-exports here.
"""

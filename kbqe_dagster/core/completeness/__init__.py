"""When day D of a table is complete (DESIGN.md §11): the decision (``decision.py``) and
what it keeps between evaluations (``state.py``).

May import the top of ``core/`` and ``record/``. No re-exports here.
"""

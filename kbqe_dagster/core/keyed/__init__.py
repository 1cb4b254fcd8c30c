"""Keyed tables (DESIGN.md §9): the contract between the stage side and the merge side
(``contract.py``) and the keyed checks (``checks.py``).

May import the top of ``core/``, ``formats/`` and ``load/``. No re-exports here.
"""

"""The staging protocol (DESIGN.md §3): file names (``naming.py``), the next offset from
committed ranges (``offsets.py``), the atomic range commit and its manifest (``commit.py``),
done-file retention (``retention_plan.py``).

May import only the top of ``core/``. No re-exports here.
"""

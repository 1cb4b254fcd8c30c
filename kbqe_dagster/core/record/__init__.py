"""One message on its way to a table (DESIGN.md §2): the Confluent framing (``wire.py``),
routing to a destination (``routing.py``), event time (``event_time.py``), the enrichment
columns (``enrichment.py``), the table's partitioning (``partitioning.py``) and the dead
letter kept for a message that cannot be staged (``dead_letter_record.py``).

May import the top of ``core/``, ``formats/`` and ``protocol/``. No re-exports here.
"""

"""The record probe (DESIGN.md §5): prove that an Avro body decodes to exactly its length and
read the few fields routing and event time need, without decoding the record.

``record_probe.py`` owns :class:`~kbqe_dagster.staging.probe.record_probe.RecordProbe`, the
probe per writer schema; ``codegen.py`` generates its exact decoder (Python source per
schema); ``regex.py`` builds its fast path (one regular expression per schema);
``runtime.py`` holds what the generated code calls per record. Imports only ``core/`` and
``staging/avro_binary.py``; the native kernel (``kernel/``) mirrors these rules.
"""

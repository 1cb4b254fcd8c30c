"""Erasure (the right to be forgotten): the ``erasure`` job, ``erasure_request_sensor`` on the
requests topic, the audit table's asset and its check that every request seen is audited."""

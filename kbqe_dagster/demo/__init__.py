"""Demo data: realistic sample events for the local stack (``kbqe produce-sample``), also
used by the end-to-end tests as the known input whose every offset must arrive once."""

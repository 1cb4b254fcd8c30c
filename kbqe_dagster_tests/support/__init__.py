"""What tests share, so that no test imports another test module (test_layers.py holds to it).

- Boundaries: framing a Kafka message value (``framing.py``), fakes at the boundaries named in
  DESIGN.md §7 (``fakes.py``), an in-memory Storage Write API (``storage_write.py``).
- Topics and their configs, per format: ``json_format.py``, ``json_schema_format.py``,
  ``protobuf_format.py``, ``json_topics.py`` (topics created and deleted on a cluster),
  ``transform_specs.py``, ``demo_messages.py`` (the demo schemas over three event days).
- Rigs and assertions over the local stack: ``storage_write_rig.py``, ``keyed_oracle.py``,
  ``staged_exactly_once.py``, ``every_column_type.py``.
- Fixtures of pure logic: ``change_layouts.py``, ``connect_json.py``, ``proto_rows.py``,
  ``corpus_stream.py``, ``deliveries.py``, ``delivery_configs.py``, ``cli.py``.
"""

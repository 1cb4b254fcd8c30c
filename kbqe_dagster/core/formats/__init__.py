"""How a topic's message values are laid out and become Avro record bodies: the source
formats (``source_format.py``), JSON Schema → Avro (``json_schema_avro.py``, with
``json_values.py``), Protobuf → Avro (``protobuf_avro.py``, ``protobuf_wire.py``), the user
decoder contract (``decoders.py``) and Avro's full-name rule (``avro_names.py``).

May import only the top of ``core/`` (errors, reasons, config_reader). No re-exports here.
"""

"""Message formats beyond Confluent-framed Avro (issue 15), each a range stager of its own
built on the public interface of ``staging/stager.py``'s ``RangeStager`` and chosen by the
seam (kbqe_dagster/stager_registry.py): ``json_stage.py`` stages schemaless JSON under the topic's
declared Avro schema (core/formats/source_format.py); ``json_schema_stage.py`` stages Confluent-framed JSON
validated against its registry JSON Schema, under the Avro record derived from it
(core/formats/json_schema_avro.py); ``protobuf_stage.py`` stages Confluent-framed Protobuf parsed
with its registry ``.proto``, under the Avro record derived from the message type
(core/formats/protobuf_avro.py); ``decoder_stage.py`` stages what a user decoder makes of each
message (core/formats/decoders.py); ``transform_stage.py`` holds the shared step of topics with
``transforms``.

May import ``core/``, ``resources/`` and ``staging/`` (its public names only); nothing in
``staging/`` imports these modules.
"""

"""Message formats beyond Confluent-framed Avro (issue 15), each a range stager of its own
built on ``staging/task.py``'s: ``json_stage.py`` stages schemaless JSON under the topic's
declared Avro schema (core/formats.py); ``decoder_stage.py`` stages what a user decoder makes
of each message (core/decoders.py)."""

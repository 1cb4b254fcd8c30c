"""What tests share: framing a Kafka message value (``framing.py``) and fakes at the
boundaries named in DESIGN.md §7 (``fakes.py``)."""

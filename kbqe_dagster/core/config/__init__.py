"""The pipeline file: ``pipeline.py`` (:class:`PipelineConfig`, the one model every job reads),
its settings sections (``sections.py``), its topics (``topics.py``) and the topics taken from
Kafka by name pattern (``discovery.py``).

May import every other room of ``core/`` but ``stage_runs/`` (the top of core: a section
of the pipeline file is read by the room whose rules it configures). No re-exports here.
"""

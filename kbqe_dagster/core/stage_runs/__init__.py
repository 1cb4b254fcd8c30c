"""When a topic's stage run is due (``due.py``) and which due topics share one run
(``groups.py``): the decisions of ``kafka_backlog_sensor`` and ``kbqe run --until-idle``.

May import the top of ``core/``, ``config/`` and ``protocol/``. No re-exports here.
"""

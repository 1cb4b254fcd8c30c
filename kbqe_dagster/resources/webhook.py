"""Posting schema and table notices to a webhook (``notifications.webhook_url``).

Each notice is one HTTP POST of its JSON document (core/load/notices.py; a Slack-compatible
``text`` field first), with a per-attempt timeout and a few retries on connection errors and
5xx answers. Posting never holds a load back: it starts after the load's work is done and
saved, runs in a worker thread, and the caller waits at most a bounded time for it; a notice
that still fails is logged (without the URL, which may hold a token) and dropped.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from kbqe_dagster.core.config.sections import NotificationSettings
from kbqe_dagster.core.load.notices import SchemaNotice

if TYPE_CHECKING:
    # Imported where notices are posted: the load job's definitions import this module in
    # every process that loads them, a stage run's included (~4 MB; issue 42).
    import requests

log = logging.getLogger(__name__)

BACKOFF_S = 0.5


def post_notices(settings: NotificationSettings, notices: Sequence[SchemaNotice]) -> int:
    """Post every notice; returns how many were delivered. Bounded: at most about
    (retries + 1) × (timeout + backoff) per notice, in a thread the caller does not wait for
    past that budget."""
    if not settings.webhook_url or not notices:
        return 0
    delivered: list[int] = []
    worker = threading.Thread(
        target=_post_all,
        args=(settings, list(notices), delivered),
        name="kbqe-notices",
        daemon=True,
    )
    worker.start()
    per_notice = (settings.retries + 1) * (settings.timeout.total_seconds() + BACKOFF_S)
    worker.join(per_notice * len(notices) + 1)
    if worker.is_alive():
        log.warning("notices: still posting after the time budget; continuing without them")
    return len(delivered)


def _post_all(
    settings: NotificationSettings, notices: list[SchemaNotice], delivered: list[int]
) -> None:
    import requests

    with requests.Session() as session:
        for notice in notices:
            if _post(session, settings, notice):
                delivered.append(1)


def _post(session: requests.Session, settings: NotificationSettings, notice: SchemaNotice) -> bool:
    import requests

    error = ""
    for attempt in range(settings.retries + 1):
        if attempt:
            time.sleep(BACKOFF_S * attempt)
        try:
            answer = session.post(
                settings.webhook_url,
                json=notice.to_json(),
                timeout=settings.timeout.total_seconds(),
            )
        except requests.RequestException as exc:
            error = type(exc).__name__
            continue
        if answer.status_code < 300:
            return True
        error = f"HTTP {answer.status_code}"
        if answer.status_code < 500 and answer.status_code != 429:
            break  # the receiver refuses this document: retrying will not help
    log.warning("notice for %s (%s) not delivered: %s", notice.table, notice.kind, error)
    return False

"""The steps ``kbqe run --until-idle`` runs after each round's loads, in order (their contract is
``after_load.py``): keyed tables add their MERGE (a no-op for append-only pipelines), erasure
its pending and new requests (a no-op without ``erasure:``); the runner's loop stays as it is.

A new step is a function of an :class:`AfterLoadContext` returning an :class:`AfterLoadResult`,
appended here. Each is imported when it runs, so ``kbqe --help`` imports no step's systems.
"""

from __future__ import annotations

from kbqe_dagster.runner.after_load import AfterLoadContext, AfterLoadResult, AfterLoadStep


def _merge_keyed_tables(context: AfterLoadContext) -> AfterLoadResult:
    """Keyed destinations' MERGE (runner/keyed_merge.py); nothing to do, and no
    run recorded, for a pipeline without keyed topics."""
    from kbqe_dagster.runner.keyed_merge import merge_keyed_tables

    return merge_keyed_tables(context)


def _apply_erasures(context: AfterLoadContext) -> AfterLoadResult:
    """Erasure requests: new ones and pending ones (runner/erasure_step.py); after the merge,
    so a pending request's last pass sees the merged current tables too."""
    from kbqe_dagster.runner.erasure_step import apply_erasures

    return apply_erasures(context)


AFTER_LOAD_STEPS: list[AfterLoadStep] = [_merge_keyed_tables, _apply_erasures]
"""Run in this order after every round's loads."""

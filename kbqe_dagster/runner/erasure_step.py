"""The erasure after-load step of ``kbqe run --until-idle``: the ``erasure`` job after each
round's loads (and merges), so a catch-up applies the requests of the requests topic and
completes the pending ones whose rows have just been loaded; the run fails when the job's
audit check fails. Nothing runs, and no run is
recorded, for a pipeline without ``erasure:``. Registered in after_load_steps.py."""

from __future__ import annotations

from kbqe_dagster.runner.after_load import AfterLoadContext, AfterLoadResult


def apply_erasures(context: AfterLoadContext) -> AfterLoadResult:
    if not context.config.erasure.enabled:
        return AfterLoadResult()
    from kbqe_dagster.defs.erasure.jobs import ERASURE_JOB

    run = context.run_job(ERASURE_JOB, None, {"kbqe/erasure": "1"})
    if not run.ok:
        return AfterLoadResult(
            run_ids=(run.run_id,), error=f"erasure run {run.run_id}: {run.error}"
        )
    return AfterLoadResult(run_ids=(run.run_id,))

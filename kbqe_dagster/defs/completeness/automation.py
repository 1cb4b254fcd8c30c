"""The automation condition for assets downstream of a table: materialize each DAY partition
**once**, after the upstream tables' ``day_complete`` check passed for that day.

Built only from Dagster's own conditions, so the default automation sensor evaluates it in the
daemon (no user-code evaluation needed):

- ``all_deps_match(check day_complete passed)``: every dependency's ``day_complete`` check
  passed for the partition (only that check: the load checks of the same asset do not count);
- ``.newly_true().since_last_handled()``: it became true since the partition was last
  requested or materialized — so a partition is requested once, and the loads that keep
  materializing the upstream partition (late events) do not request it again;
- ``missing()`` and ``~in_progress()``: never a partition that exists or is running.

Downstream of HOUR tables, pass ``check=HOUR_COMPLETE``: the same condition per HOUR partition
(``MONTH_COMPLETE``, ``YEAR_COMPLETE`` downstream of MONTH and YEAR tables).

A run that fails is not retried by the condition (the partition is handled); rerun it from the
UI, or add ``| execution_failed()`` to the first operand if retries are wanted.
"""

from __future__ import annotations

import dagster as dg

from kbqe_dagster.defs.completeness.checks import (
    DAY_COMPLETE,
    HOUR_COMPLETE,
    MONTH_COMPLETE,
    YEAR_COMPLETE,
)

__all__ = [
    "DAY_COMPLETE",
    "HOUR_COMPLETE",
    "MONTH_COMPLETE",
    "YEAR_COMPLETE",
    "once_after_day_complete",
    "upstream_day_complete",
]


def upstream_day_complete(
    *tables: dg.AssetKey, check: str = DAY_COMPLETE
) -> dg.AutomationCondition:
    """True for a partition when each dependency among ``tables`` passed ``day_complete``
    (``check``: ``hour_complete`` for HOUR tables) for it (a dependency that is not a table
    of ``tables`` is not asked)."""
    passed = dg.AutomationCondition.any_checks_match(dg.AutomationCondition.check_passed()).allow(
        dg.AssetSelection.checks(*(dg.AssetCheckKey(t, check) for t in tables))
    )
    return (
        dg.AutomationCondition.all_deps_match(passed)
        .allow(dg.AssetSelection.assets(*tables))
        .with_label("upstream day complete")
    )


def once_after_day_complete(
    *tables: dg.AssetKey, check: str = DAY_COMPLETE
) -> dg.AutomationCondition:
    """Each DAY partition once, after ``tables`` are complete for that day (``check``
    ``hour_complete``: each HOUR partition, after that hour)."""
    return (
        dg.AutomationCondition.missing()
        & upstream_day_complete(*tables, check=check).newly_true().since_last_handled()
        & ~dg.AutomationCondition.in_progress()
    ).with_label("once after day complete")

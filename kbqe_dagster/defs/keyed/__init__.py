"""Dagster wiring of keyed destinations: the current-state and history assets downstream of
each changelog, and the merge job that runs in the load pool (kbqe_dagster/keyed/ does the
work)."""

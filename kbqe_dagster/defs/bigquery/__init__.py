"""The load side in Dagster: destination table assets, load/poll/retention jobs, schedules
and checks."""

"""Running a fleet's jobs from outside a run: :mod:`.control` (pause, resume, schedule overrides, force unlock),
:mod:`.listing` (the jobs and their locks), :mod:`.alerts` (overdue and failing jobs), :mod:`.health` and
:mod:`.checkup` (store outages and the health report). What runs with a body is in :mod:`mutexcron.running`."""

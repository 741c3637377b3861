"""Scheduling: what happens to a job from its cron spec to its run. :mod:`.scheduler` the :class:`Scheduler`
(start, shutdown, catch-up) and :mod:`.options` its checked options; :mod:`.triggers` what APScheduler is given,
:mod:`.executor` where APScheduler hands a fire over, :mod:`.fires` the ``Fire`` value, :mod:`.batch` the fires due
at one instant, :mod:`.runs` one fire's acquire, body and release, :mod:`.busy` what a busy fire does;
:mod:`.schedules`, :mod:`.catchup` and :mod:`.lifecycle` around them. Run-time schedules' definitions are in
:mod:`mutexcron.definitions`, a body's run in :mod:`mutexcron.running`."""

from .scheduler import Scheduler

__all__ = ["Scheduler"]

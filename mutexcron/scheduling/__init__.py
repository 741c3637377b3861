"""Scheduling: what happens to a job from its cron spec to its run. :mod:`.scheduler` the :class:`Scheduler`
(start, shutdown, catch-up) and :mod:`.options` its checked options; :mod:`.triggers` what APScheduler is given,
:mod:`.executor` where APScheduler hands a fire over, :mod:`.fires` the ``Fire`` value, :mod:`.batch` the fires due
at one instant, :mod:`.runs` one fire's acquire, body and release; :mod:`.schedules`, :mod:`.catchup` and
:mod:`.lifecycle` around them; :mod:`.runtime` the schedules created at run time."""

from .scheduler import Scheduler

__all__ = ["Scheduler"]

"""The admin: every declared job with its LIVE lock state from the configured store, "run now", "force
unlock", pause, resume and schedule actions, the run history, and the ``django://`` task backend's scheduled tasks.

Django imports this package (admin autodiscovery), which registers the four pages: ``lock_admin``
(the Locks page and its views; its rows come from ``lock_rows``, its control actions from ``control_views``
with ``forms`` and ``schedules``), ``schedule_admin`` (run-time schedules, with ``schedule_rows`` and
``schedule_forms``), ``history_admin`` and ``task_admin``; ``pages`` holds what the live pages share.
``display`` holds how they show times, durations, errors and secrets.
"""

from __future__ import annotations

from .control_views import PAUSE_PERMISSION, RETIME_PERMISSION
from .history_admin import JobRunAdmin
from .lock_admin import FORCE_UNLOCK_PERMISSION, LockAdmin
from .schedule_admin import ScheduleAdmin
from .task_admin import ScheduledTaskAdmin

__all__ = [
    "FORCE_UNLOCK_PERMISSION",
    "PAUSE_PERMISSION",
    "RETIME_PERMISSION",
    "JobRunAdmin",
    "LockAdmin",
    "ScheduleAdmin",
    "ScheduledTaskAdmin",
]

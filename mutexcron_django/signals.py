"""Django signals sent for every fire on this instance; each carries the ``RunRecord`` as ``record``.

- ``job_started``: a body is about to run (``record.outcome`` is None).
- ``job_finished``: a body ran (``succeeded`` or ``failed``).
- ``job_skipped``: this instance did not run the fire (``skipped_*``).
- ``job_enqueued``: this instance won the fire of a ``run_on="tasks"`` job and enqueued its body
  (``record.task_id``); the worker that runs it sends ``job_started`` and ``job_finished``.

Once per incident across the fleet, on the instance that noticed it first, each carrying the
:class:`mutexcron.ops.alerts.Alert` as ``alert``:

- ``job_overdue``: a tick of the job's schedule went unrun past its ``alert_after``.
- ``job_failing``: the job's latest run failed.
- ``job_recovered``: a run succeeded after an overdue or failing incident.
- ``job_paused``: the job paused itself on every instance after its ``pause_on_failure`` failed runs in a row.
"""

from django.dispatch import Signal

job_started = Signal()
job_finished = Signal()
job_skipped = Signal()
job_enqueued = Signal()
job_overdue = Signal()
job_failing = Signal()
job_recovered = Signal()
job_paused = Signal()

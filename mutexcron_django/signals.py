"""Django signals sent for every fire on this instance; each carries the ``RunRecord`` as ``record``.

- ``job_started``: a body is about to run (``record.outcome`` is None).
- ``job_finished``: a body ran (``succeeded`` or ``failed``).
- ``job_skipped``: this instance did not run the fire (``skipped_*``).
"""

from django.dispatch import Signal

job_started = Signal()
job_finished = Signal()
job_skipped = Signal()

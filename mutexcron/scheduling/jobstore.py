"""The scheduler's job store: APScheduler's :class:`MemoryJobStore`, its order found by the C ``bisect`` on a list of
keys kept beside its jobs.

MemoryJobStore keeps its jobs sorted by next run time, then id, and finds a job's place with a bisection written in
Python that converts each next run time with ``utctimetuple()``. Each fire moves its job in that list: at 2,000
per-second jobs that was about an eighth of an instance's busy time (bench/README.md). This store keeps the same
order, the same errors and the same answers, with ``datetime.timestamp()`` and ``bisect`` (both in C).
"""

from __future__ import annotations

import math
from bisect import bisect_left, bisect_right
from datetime import datetime
from operator import itemgetter

from apscheduler.job import Job
from apscheduler.jobstores.base import ConflictingIdError, JobLookupError
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.util import datetime_to_utc_timestamp

__all__ = ["SortedJobStore"]

Key = tuple[float, str]  # (next run time as a UTC timestamp, math.inf for a paused job; job id)
_timestamp_of_key = itemgetter(0)


def _timestamp(when: datetime | None) -> float | None:
    """``when`` as a UTC timestamp, as APScheduler's ``datetime_to_utc_timestamp`` (a naive time is UTC)."""
    if when is None:
        return None
    return when.timestamp() if when.tzinfo is not None else datetime_to_utc_timestamp(when)


def _key(job_id: str, timestamp: float | None) -> Key:
    return (math.inf if timestamp is None else timestamp, job_id)


class SortedJobStore(MemoryJobStore):
    """A MemoryJobStore whose ``_jobs`` (``(job, timestamp)`` pairs) has a twin ``_keys`` list, sorted alike, that
    ``bisect`` searches."""

    def __init__(self) -> None:
        super().__init__()
        self._keys: list[Key] = []

    def get_due_jobs(self, now: datetime) -> list[Job]:
        due = bisect_right(self._keys, _timestamp(now), key=_timestamp_of_key)
        return [job for job, _ in self._jobs[:due]]

    def add_job(self, job: Job) -> None:
        if job.id in self._jobs_index:
            raise ConflictingIdError(job.id)
        timestamp = _timestamp(job.next_run_time)
        self._insert(job, timestamp)
        self._jobs_index[job.id] = (job, timestamp)

    def update_job(self, job: Job) -> None:
        old_job, old_timestamp = self._jobs_index.get(job.id, (None, None))
        if old_job is None:
            raise JobLookupError(job.id)
        index = self._index(old_job.id, old_timestamp)
        timestamp = _timestamp(job.next_run_time)
        if timestamp == old_timestamp:
            self._jobs[index] = (job, timestamp)
        else:
            del self._jobs[index], self._keys[index]
            self._insert(job, timestamp)
        self._jobs_index[old_job.id] = (job, timestamp)

    def remove_job(self, job_id: str) -> None:
        job, timestamp = self._jobs_index.get(job_id, (None, None))
        if job is None:
            raise JobLookupError(job_id)
        index = self._index(job_id, timestamp)
        del self._jobs[index], self._keys[index]
        del self._jobs_index[job.id]

    def remove_all_jobs(self) -> None:
        super().remove_all_jobs()
        self._keys = []

    def _insert(self, job: Job, timestamp: float | None) -> None:
        key = _key(job.id, timestamp)
        index = bisect_left(self._keys, key)
        self._keys.insert(index, key)
        self._jobs.insert(index, (job, timestamp))

    def _index(self, job_id: str, timestamp: float | None) -> int:
        """Where the job with ``job_id`` and ``timestamp`` is (ids are unique, so its key is found exactly)."""
        return bisect_left(self._keys, _key(job_id, timestamp))

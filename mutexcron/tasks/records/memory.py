"""Task records in this process's memory: the :class:`TaskRecordStore` contract without a server.

For tests and single-process setups (a broker backend whose records need not survive a restart). It
keeps the contract as the Redis and SQL stores do, on one lock: every method is one compare-and-set on
one record, and a record whose expiry has passed counts as absent (and is dropped when next seen).
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from ..._common import clip_error
from ..model import NewTask, TaskStatus
from .base import DEFAULT_RETENTION, Claim, TaskRecord, TaskRecordStore, Verdict, check_retention, decide_claim

__all__ = ["MemoryTaskRecords"]

FINISHED = (TaskStatus.SUCCEEDED, TaskStatus.FAILED, TaskStatus.CANCELLED)


@dataclass
class _Entry:
    record: TaskRecord
    expires_at: float | None = None  # time.monotonic(); None: kept until its message arrives (or retried)
    result: str | None = None


class MemoryTaskRecords(TaskRecordStore):
    """Task records in a dict of this process, guarded by one lock."""

    def __init__(self, *, retention: timedelta = DEFAULT_RETENTION) -> None:
        self.retention = check_retention(retention)
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def _live(self, task_id: str) -> _Entry | None:
        """The task's entry if it has not expired (called with the lock held)."""
        entry = self._entries.get(task_id)
        if entry is not None and entry.expires_at is not None and entry.expires_at <= time.monotonic():
            del self._entries[task_id]
            return None
        return entry

    def _expiry(self) -> float:
        return time.monotonic() + self.retention.total_seconds()

    def create(self, tasks: Sequence[NewTask]) -> set[str]:
        created: set[str] = set()
        with self._lock:
            for task in tasks:
                if self._live(task.id) is not None:
                    continue  # a live record of this id is kept (an expired one was dropped just now)
                record = TaskRecord(id=task.id, task_type=task.task_type, payload=task.payload, run_at=task.run_at,
                                    status=TaskStatus.SCHEDULED, attempts=0, gen=1, trace_context=task.trace_context)
                self._entries[task.id] = _Entry(record)
                created.add(task.id)
        return created

    def discard(self, task_ids: Sequence[str]) -> None:
        with self._lock:
            for task_id in task_ids:
                self._entries.pop(task_id, None)

    def get(self, task_id: str) -> TaskRecord | None:
        with self._lock:
            entry = self._live(task_id)
            return entry.record if entry is not None else None

    def cancel(self, task_id: str) -> bool:
        with self._lock:
            entry = self._live(task_id)
            if entry is None or entry.record.status != TaskStatus.SCHEDULED:
                return False
            entry.record = replace(entry.record, status=TaskStatus.CANCELLED)
            return True

    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        with self._lock:
            entry = self._live(task_id)
            if entry is None:
                return Claim(Verdict.MISSING, 0)
            record = entry.record
            claim = decide_claim(record.status, record.gen, record.attempts, gen=gen, attempt=attempt,
                                 redelivered=redelivered)
            if claim.verdict is Verdict.RUN:
                entry.record = replace(record, status=TaskStatus.RUNNING, gen=gen, attempts=claim.attempts)
            if claim.verdict in (Verdict.RUN, Verdict.CANCELLED):  # claimed, or a cancelled task's message came:
                # the record is kept for the retention from now
                entry.expires_at = self._expiry()
            return claim

    def _running(self, task_id: str, gen: int) -> _Entry | None:
        entry = self._live(task_id)
        if entry is None or entry.record.status != TaskStatus.RUNNING or entry.record.gen != gen:
            return None
        return entry

    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        if status not in FINISHED:
            raise ValueError(f"finish() takes succeeded, failed or cancelled, not {status!r}")
        with self._lock:
            entry = self._running(task_id, gen)
            if entry is None:
                return False
            entry.record = replace(entry.record, status=status, error=clip_error(error) or None)
            entry.expires_at = None if status == TaskStatus.FAILED else self._expiry()  # failed: kept until retried
            return True

    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        with self._lock:
            entry = self._running(task_id, gen)
            if entry is None:
                return False
            entry.record = replace(entry.record, status=TaskStatus.SCHEDULED, gen=new_gen, run_at=run_at,
                                   error=clip_error(error) or None)
            entry.expires_at = None
            return True

    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        with self._lock:
            entry = self._live(task_id)
            if entry is None:
                return False
            record = entry.record
            if record.status == TaskStatus.FAILED and record.gen == gen:
                entry.record = replace(record, status=TaskStatus.SCHEDULED, gen=new_gen, run_at=run_at, attempts=0)
                entry.expires_at = None
                return True
            # The re-published message overtook this call (and claimed the record): done already.
            return record.status != TaskStatus.CANCELLED and record.gen >= new_gen

    def pending_counts(self) -> Mapping[str, int]:
        with self._lock:
            return Counter(entry.record.task_type for entry in self._entries.values()
                           if entry.record.status == TaskStatus.SCHEDULED)

    def store_result(self, task_id: str, text: str) -> bool:
        with self._lock:
            entry = self._live(task_id)
            if entry is None:
                return False
            entry.result = text
            return True

    def load_result(self, task_id: str) -> str | None:
        with self._lock:
            entry = self._live(task_id)
            return entry.result if entry is not None else None

    def __repr__(self) -> str:
        return f"<MemoryTaskRecords {len(self._entries)} record(s)>"

"""Task records kept beside a broker: status, attempts, error, payload, cancel mark and result.

A message broker (RabbitMQ) holds a delayed task as a message that nobody can find, change or delete
before it is delivered, so its backend keeps one small record per task in a :class:`TaskRecordStore`
and asks it before running a delivered message: ``cancel`` and ``claim`` race on one record (exactly
one wins), and every message carries a *generation* so that a stale copy is dropped. Each method is one
atomic compare-and-set on one record: Redis (:mod:`mutexcron.tasks.records.redis`), SQL
(``mutexcron_django.sql.tasks.records``) and memory (:mod:`mutexcron.tasks.records.memory`) implement it,
and ``tests/tasks/contract.py`` proves them all. Stores are picked by URL with :func:`cancel_store_from_url`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum

from ..._options import positive_duration
from ...errors import StoreConfigError
from ...plugins import Wording, build_from_url, schemes
from ...urls import seconds_option, shown
from ..model import NewTask, TaskError, TaskInfo, TaskStatus, stored_payload

__all__ = [
    "SCHEMES",
    "Claim",
    "RecordDataError",
    "TaskRecord",
    "TaskRecordStore",
    "Verdict",
    "cancel_store_from_url",
    "decide_claim",
]

DEFAULT_RETENTION = timedelta(days=7)
DEFAULT_PREFIX = "mutexcron:taskmark:"


class RecordDataError(TaskError, ValueError):
    """The record store cannot keep a value it was given (in PostgreSQL, a task id with a NUL byte; in SQL, one
    longer than its column): bad data, refused as such, never an outage (``StoreUnavailable``). The message
    names the task id."""


class Verdict(StrEnum):
    """What a consumer does with a delivered message, as :meth:`TaskRecordStore.claim` decides."""

    RUN = "run"  # claimed: run the handler
    CANCELLED = "cancelled"  # cancelled before it started: drop it
    DONE = "done"  # this generation already succeeded or failed (a redelivery after the outcome): drop it
    STALE = "stale"  # an older generation than the record's (its retry was already published): drop it
    DUPLICATE = "duplicate"  # a second copy of a generation that is running on a live consumer: drop it
    MISSING = "missing"  # no record (never scheduled, lost, or expired after its message came): never run it


@dataclass(frozen=True)
class Claim:
    verdict: Verdict
    attempts: int  # the attempt number this run is (after the claim), or the record's count


def decide_claim(status: TaskStatus, record_gen: int, attempts: int, *, gen: int, attempt: int,
                 redelivered: bool) -> Claim:
    """What :meth:`TaskRecordStore.claim` decides on a live record (its ``status``, generation and ``attempts``), in
    one place for every store that decides in Python (Redis decides in Lua, by the same rules)."""
    if status == TaskStatus.CANCELLED:
        return Claim(Verdict.CANCELLED, attempts)
    if gen < record_gen:
        return Claim(Verdict.STALE, attempts)
    if status == TaskStatus.SUCCEEDED:
        return Claim(Verdict.DONE, attempts)
    if gen != record_gen:
        return Claim(Verdict.RUN, attempt)
    if status == TaskStatus.FAILED:
        return Claim(Verdict.DONE, attempts)
    if status == TaskStatus.RUNNING and not redelivered:
        return Claim(Verdict.DUPLICATE, attempts)
    return Claim(Verdict.RUN, attempts + 1)


@dataclass(frozen=True)
class TaskRecord:
    """One task's record; ``payload`` is JSON text, ``run_at`` aware UTC."""

    id: str
    task_type: str
    payload: str
    run_at: datetime
    status: TaskStatus
    attempts: int
    gen: int
    error: str | None = None
    trace_context: str | None = None  # the task's NewTask.trace_context (JSON text), kept for retry()

    def info(self) -> TaskInfo:
        return TaskInfo(
            id=self.id, task_type=self.task_type, payload=stored_payload(self.payload) if self.payload else None,
            run_at=self.run_at, status=self.status,
            attempts=self.attempts, error=self.error,
        )


class TaskRecordStore(ABC):
    """Task records beside a broker. Every method raises :class:`StoreUnavailable` on connection errors, and
    :class:`RecordDataError` for a task id it cannot keep (a store that keeps any text answers as for an unknown id).

    ``retention`` is how long a record is kept once its message has arrived (so that a finished task can
    be inspected, and a late copy of its message is still fenced): a claim, a finish, and a cancelled
    message's arrival set the expiry to now + ``retention``. Until its message arrives a
    record (scheduled, or cancelled) never expires, so a cancel holds however late workers start; a
    failed task is kept until it is retried (as the Redis task backend keeps it).
    """

    retention: timedelta = DEFAULT_RETENTION

    @abstractmethod
    def create(self, tasks: Sequence[NewTask]) -> set[str]:
        """Write ``scheduled`` records (generation 1, no attempts) before their messages are published; returns
        the ids written. A live record of the same id is kept as it is (not written, not returned): its message
        is on its way, so scheduling a caller's id twice publishes one message. An expired one is overwritten."""

    @abstractmethod
    def discard(self, task_ids: Sequence[str]) -> None:
        """Delete records whose messages could not be published."""

    @abstractmethod
    def get(self, task_id: str) -> TaskRecord | None:
        """The record, or None."""

    @abstractmethod
    def cancel(self, task_id: str) -> bool:
        """``scheduled`` -> ``cancelled``; False for anything else (started, finished, already cancelled, unknown)."""

    @abstractmethod
    def claim(self, task_id: str, *, gen: int, attempt: int, redelivered: bool) -> Claim:
        """Decide what to do with a delivered message of generation ``gen``, and claim it if it should run.

        * no record -> MISSING (the consumer runs nothing without a record: it may have been cancelled);
        * cancelled -> CANCELLED (the record now expires after the retention);
        * older generation -> STALE; succeeded -> DONE;
        * same generation: failed -> DONE; running and not ``redelivered`` -> DUPLICATE;
        * otherwise (scheduled; running and redelivered, i.e. the broker saw its consumer go; a newer
          generation whose record update has not landed yet) -> RUN: status ``running``, generation
          ``gen``, attempts + 1 (a run whose consumer died counts as an attempt) or, for a newer
          generation, the message's own ``attempt`` number.
        """

    @abstractmethod
    def finish(self, task_id: str, *, gen: int, status: TaskStatus, error: str | None = None) -> bool:
        """``running`` generation ``gen`` -> ``succeeded`` / ``failed`` / ``cancelled``; False if it moved on."""

    @abstractmethod
    def reschedule(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime, error: str) -> bool:
        """``running`` generation ``gen`` -> ``scheduled`` generation ``new_gen`` (its retry was published)."""

    @abstractmethod
    def reopen(self, task_id: str, *, gen: int, new_gen: int, run_at: datetime) -> bool:
        """``failed`` generation ``gen`` -> ``scheduled`` generation ``new_gen``, no attempts (retry by hand).

        Also True if the record is already at ``new_gen`` or later: the re-published message overtook this call.
        """

    @abstractmethod
    def pending_counts(self) -> Mapping[str, int] | None:
        """How many ``scheduled`` records of each type there are (their message not yet claimed): the
        backend's :meth:`~mutexcron.tasks.backends.base.TaskBackend.pending_counts`. None when this store
        cannot count them cheaply."""

    @property
    def pending_source(self) -> str:
        """Names the records :meth:`pending_counts` counts (see ``TaskBackend.pending_source``); by default,
        this object."""
        return f"{type(self).__qualname__}@{id(self):x}"

    @abstractmethod
    def store_result(self, task_id: str, text: str) -> bool:
        """Keep ``text`` (a task's outcome) with its record, replacing the one kept before: it lives and expires
        with the record. False, and nothing kept (the record is not brought back), if the record is gone."""

    @abstractmethod
    def load_result(self, task_id: str) -> str | None:
        """The text :meth:`store_result` kept for the task, or None (none kept, or the record is gone)."""

    def eviction_policy(self) -> str | None:
        """The server's policy for dropping keys when its memory is full (Redis's ``maxmemory-policy``), or None
        for a store that never evicts (or may not say): what ``check --deploy`` warns about (W003)."""
        return None

    def close(self) -> None:  # noqa: B027 - optional
        """Release connections."""


def check_retention(retention: object) -> timedelta:
    """A record store's ``retention``, checked: a positive timedelta, else StoreConfigError."""
    return positive_duration(retention, what="cancel store retention", error=StoreConfigError, seconds=False)


def retention_option(url: str, options: dict[str, str]) -> timedelta:
    """A cancel store URL's ``?retention=<seconds>`` (how long finished records are kept), or the default."""
    if "retention" not in options:
        return DEFAULT_RETENTION
    return seconds_option(url, "retention", options["retention"], what="cancel store")


# -- choosing a store by URL ---------------------------------------------------------------------------

# scheme -> dotted path of the store class (imported on first use); other packages add theirs (mutexcron.plugins)
SCHEMES = schemes("record_store")


def cancel_store_from_url(url: str | TaskRecordStore | None, *, backend: str = "this task backend") -> TaskRecordStore:
    """The cancel store (a :class:`TaskRecordStore`) from a URL (``redis://…``), or the object itself."""
    if isinstance(url, TaskRecordStore):
        return url
    if url is None or url == "":
        raise StoreConfigError(
            f"{backend} needs a cancel store for task status and cancellation: "
            "pass cancel_store='redis://…' (TaskQueue(url, cancel_store=…))"
        )
    if not isinstance(url, str) or "://" not in url:
        raise StoreConfigError(f"cancel store must be a URL (redis://…), not {shown(url)}")
    store: TaskRecordStore = build_from_url(url, SCHEMES, TaskRecordStore, Wording("cancel store"))
    return store

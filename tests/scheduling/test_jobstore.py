"""The scheduler's job store (mutexcron.scheduling.jobstore) answers as APScheduler's MemoryJobStore does: the same
jobs due, in the same order, the same next run time and the same errors, whatever the sequence of changes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from apscheduler.job import Job
from apscheduler.jobstores.base import ConflictingIdError, JobLookupError
from apscheduler.jobstores.memory import MemoryJobStore
from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.date import DateTrigger
from hypothesis import given, settings
from hypothesis import strategies as st

from mutexcron.scheduling.jobstore import SortedJobStore

START = datetime(2026, 12, 6, 6, 0, 0, tzinfo=UTC)
IDS = [f"job{index}" for index in range(8)]
# Few instants, so that jobs often share a next run time (the id then orders them); None is a paused job. Some are
# the same instant in another zone, and some differ by a microsecond.
WHEN = st.one_of(
    st.none(),
    st.integers(0, 6).map(lambda second: START + timedelta(seconds=second)),
    st.integers(0, 6).map(lambda second: (START + timedelta(seconds=second)).astimezone(timezone(timedelta(hours=2)))),
    st.integers(0, 3).map(lambda micro: START + timedelta(seconds=2, microseconds=micro)),
)
OPERATION = st.one_of(
    st.tuples(st.just("add"), st.sampled_from(IDS), WHEN),
    st.tuples(st.just("update"), st.sampled_from(IDS), WHEN),
    st.tuples(st.just("remove"), st.sampled_from(IDS), st.none()),
    st.tuples(st.just("remove_all"), st.none(), st.none()),
)


def _nothing() -> None:
    return None


def _job(aps: BackgroundScheduler, job_id: str, when: datetime | None) -> Job:
    return Job(aps, id=job_id, func=_nothing, trigger=DateTrigger(START), executor="default", args=(), kwargs={},
               name=job_id, misfire_grace_time=None, coalesce=True, max_instances=1, next_run_time=when)


def _answers(store: MemoryJobStore, job_ids: list[str]) -> tuple[object, ...]:
    """Everything a scheduler reads from a store, at each instant of the range and beyond."""
    instants = [START + timedelta(seconds=second, microseconds=micro) for second in range(-1, 8) for micro in (0, 1)]
    return (
        [job.id for job in store.get_all_jobs()],
        store.get_next_run_time(),
        [[job.id for job in store.get_due_jobs(now)] for now in instants],
        [store.lookup_job(job_id) is not None for job_id in job_ids],
    )


def _apply(store: MemoryJobStore, jobs: dict[str, Job], operation: tuple[str, str | None, datetime | None]) -> str:
    """One change to ``store``; what it raised, by name ('' when nothing)."""
    verb, job_id, _ = operation
    try:
        if verb == "add":
            assert job_id is not None
            store.add_job(jobs[job_id])
        elif verb == "update":
            assert job_id is not None
            store.update_job(jobs[job_id])
        elif verb == "remove":
            assert job_id is not None
            store.remove_job(job_id)
        else:
            store.remove_all_jobs()
    except (ConflictingIdError, JobLookupError) as error:
        return type(error).__name__
    return ""


@settings(max_examples=300, deadline=None)
@given(st.lists(OPERATION, max_size=40))
def test_the_store_answers_as_memoryjobstore_after_any_sequence_of_changes(
        operations: list[tuple[str, str | None, datetime | None]]) -> None:
    aps = BackgroundScheduler(timezone=UTC)
    ours, theirs = SortedJobStore(), MemoryJobStore()
    # Each store holds its own Job objects, as APScheduler changes a job's next run time before update_job.
    our_jobs = {job_id: _job(aps, job_id, None) for job_id in IDS}
    their_jobs = {job_id: _job(aps, job_id, None) for job_id in IDS}
    for operation in operations:
        verb, job_id, when = operation
        if job_id is not None and verb in ("add", "update"):
            our_jobs[job_id]._modify(next_run_time=when)
            their_jobs[job_id]._modify(next_run_time=when)
        assert _apply(ours, our_jobs, operation) == _apply(theirs, their_jobs, operation), operation
        assert _answers(ours, IDS) == _answers(theirs, IDS), operation


def test_a_job_added_twice_is_refused_with_its_id() -> None:
    store = SortedJobStore()
    job = _job(BackgroundScheduler(timezone=UTC), "nightly", START)
    store.add_job(job)
    with pytest.raises(ConflictingIdError, match="nightly"):
        store.add_job(job)


def test_updating_or_removing_an_unknown_job_names_it() -> None:
    store = SortedJobStore()
    with pytest.raises(JobLookupError, match="nightly"):
        store.update_job(_job(BackgroundScheduler(timezone=UTC), "nightly", START))
    with pytest.raises(JobLookupError, match="nightly"):
        store.remove_job("nightly")


def test_due_jobs_come_in_next_run_time_then_id_order_and_paused_jobs_never() -> None:
    aps, store = BackgroundScheduler(timezone=UTC), SortedJobStore()
    for job_id, when in [("b", START), ("a", START), ("late", START + timedelta(seconds=5)), ("paused", None),
                         ("early", START - timedelta(seconds=1))]:
        store.add_job(_job(aps, job_id, when))
    assert [job.id for job in store.get_due_jobs(START)] == ["early", "a", "b"]
    assert [job.id for job in store.get_due_jobs(START + timedelta(days=365))] == ["early", "a", "b", "late"]
    assert store.get_next_run_time() == START - timedelta(seconds=1)

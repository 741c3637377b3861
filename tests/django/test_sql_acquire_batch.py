"""The SQL lock store's acquire_many on PostgreSQL and MariaDB: one transaction per batch, rows locked in name
order, and a row that a stopped transaction holds answered BUSY instead of stopping the batch, as it is to
acquire(), a batch of one there."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections, transaction
from django.test.utils import CaptureQueriesContext

from mutexcron.errors import StoreUnavailable
from mutexcron.stores import AcquireRequest, AcquireStatus, Acquisition
from mutexcron_django.models import Lock
from mutexcron_django.sql.store import BATCH_LOCK_TIMEOUT, DjangoLockStore

TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
LEASE = timedelta(seconds=30)
BOTH = ("job", "other")
SERVERS = [pytest.param(alias, marks=pytest.mark.django_db(transaction=True, databases=[alias]))
           for alias in ("postgres", "mariadb")]


def _statuses(answers: list[Acquisition | StoreUnavailable]) -> list[AcquireStatus]:
    assert all(isinstance(answer, Acquisition) for answer in answers), answers
    return [answer.status for answer in answers if isinstance(answer, Acquisition)]


@pytest.fixture
def closing_connections() -> Iterator[None]:
    yield
    connections.close_all()


@pytest.mark.parametrize("alias", SERVERS)
def test_a_batch_asks_the_database_a_fixed_number_of_queries_whatever_its_size(alias: str) -> None:
    store = DjangoLockStore(alias)
    names = [f"job.{n:02}" for n in range(40)]
    store.seed(names)
    assert store.batches_acquires
    with CaptureQueriesContext(connections[alias]) as queries:
        answers = store.acquire_many([AcquireRequest(name, "A", LEASE, TICK) for name in names])
    assert _statuses(answers) == [AcquireStatus.ACQUIRED] * 40
    # (SET lock_timeout on PostgreSQL), SELECT … FOR UPDATE, one UPDATE for the 40 won rows; BEGIN and COMMIT aside
    assert len([query for query in queries.captured_queries if query["sql"] not in ("BEGIN", "COMMIT")]) <= 3
    tokens = {state.name: state.token for state in store.locks()}
    assert [answer.token for answer in answers if isinstance(answer, Acquisition)] == [tokens[name] for name in names]


@pytest.mark.parametrize("alias", SERVERS)
def test_a_batch_of_another_owner_for_the_same_tick_takes_nothing(alias: str) -> None:
    store = DjangoLockStore(alias)
    store.seed(["a", "b"])
    first = store.acquire_many([AcquireRequest(name, "A", LEASE, TICK) for name in ("a", "b")])
    second = store.acquire_many([AcquireRequest(name, "B", LEASE, TICK) for name in ("a", "b")])
    assert _statuses(first) == [AcquireStatus.ACQUIRED] * 2
    assert _statuses(second) == [AcquireStatus.ALREADY_RAN] * 2  # A's tick is this one
    assert {state.locked_by for state in store.locks()} == {"A"}


@pytest.mark.parametrize("alias", SERVERS)
def test_a_batch_whose_row_a_stopped_transaction_holds_answers_busy_after_the_lock_timeout(
        alias: str, closing_connections: None) -> None:
    """A holder frozen between its UPDATE and its COMMIT holds the row lock: the batch answers BUSY (it never
    runs what another may be taking) instead of waiting for it, and takes the tick once the row is free."""
    store = DjangoLockStore(alias)
    store.seed(["job", "other"])
    holding, done = threading.Event(), threading.Event()

    def frozen_holder() -> None:
        try:
            with transaction.atomic(using=alias):
                list(Lock.objects.using(alias).select_for_update().filter(name="job"))
                holding.set()
                done.wait(60)
                transaction.set_rollback(True, using=alias)
        finally:
            connections.close_all()

    holder = threading.Thread(target=frozen_holder)
    holder.start()
    try:
        assert holding.wait(30)
        answers: list[list[Acquisition | StoreUnavailable]] = []

        def ask() -> None:
            try:
                answers.append(store.acquire_many([AcquireRequest(name, "A", LEASE, TICK) for name in BOTH]))
            finally:
                connections.close_all()

        asker = threading.Thread(target=ask)
        asker.start()
        asked = time.monotonic()
        asker.join(BATCH_LOCK_TIMEOUT.total_seconds() + 20)
        assert not asker.is_alive(), "the batch waited for the stopped holder past its lock timeout"
        print(f"{alias}: the batch answered after {time.monotonic() - asked:.2f}s")
        assert _statuses(answers[0]) == [AcquireStatus.BUSY, AcquireStatus.BUSY]
        assert all(not state.locked for state in store.locks())  # the batch took nothing
        # acquire() is a batch of one (the scheduler's retries of a busy fire, catch-up): it waits no longer
        assert store.acquire("job", owner="A", lease=LEASE, fire_time=TICK).status is AcquireStatus.BUSY
    finally:
        done.set()
        holder.join(30)
    again = store.acquire_many([AcquireRequest(name, "A", LEASE, TICK) for name in BOTH])
    assert _statuses(again) == [AcquireStatus.ACQUIRED, AcquireStatus.ACQUIRED]

"""The locks of bodies that end at once are given back together (mutexcron.scheduling.releases), on a store that
batches releases; each thread still returns once its own lock is released, with its own answer.

The store is a real Redis store whose release_many is noted (and, where a test needs a batch to be under way,
held until the test lets it go); the scheduler's use of it is proven by the fleet tests, which run on this path.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron.errors import StoreUnavailable
from mutexcron.scheduling.releases import Releases
from mutexcron.stores import LockStore, MemoryLockStore, RedisLockStore, ReleaseRequest, store_from_url
from tests.support import wait_until

LONG = timedelta(seconds=30)
TICK = datetime(2026, 3, 1, 6, 0, 0, tzinfo=UTC)
THREADS = 12


class NotingRedisStore(RedisLockStore):
    """Notes the size of each release_many; the first one waits for ``go`` once ``hold_first`` is set."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.batches: list[int] = []
        self.hold_first = False
        self.sending = threading.Event()
        self.go = threading.Event()

    def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
        self.batches.append(len(requests))
        if self.hold_first and len(self.batches) == 1:
            self.sending.set()
            assert self.go.wait(10)
        return super().release_many(requests)


@pytest.fixture
def store(redis_url: str) -> Iterator[NotingRedisStore]:
    plain = store_from_url(redis_url)
    assert isinstance(plain, RedisLockStore)
    noting = NotingRedisStore(plain.client, prefix=plain.prefix)
    yield noting
    noting.close()


def taken(store: LockStore, names: list[str]) -> dict[str, int]:
    """Each lock of ``names`` taken for TICK; its token."""
    tokens = {}
    for name in names:
        token = store.acquire(name, owner="A", lease=LONG, fire_time=TICK).token
        assert token is not None
        tokens[name] = token
    return tokens


def release_in_threads(releases: Releases, requests: list[ReleaseRequest]) -> dict[str, bool | BaseException]:
    answers: dict[str, bool | BaseException] = {}
    lock = threading.Lock()

    def release(request: ReleaseRequest) -> None:
        try:
            answer: bool | BaseException = releases.release(request)
        except BaseException as error:
            answer = error
        with lock:
            answers[request.name] = answer

    threads = [threading.Thread(target=release, args=(request,)) for request in requests]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    return answers


def test_releases_queued_while_one_is_sent_go_together_in_the_next_round_trip(store: NotingRedisStore) -> None:
    names = [f"job.{n}" for n in range(THREADS)]
    tokens = taken(store, names)
    releases = Releases(store)
    store.hold_first = True
    first = threading.Thread(target=releases.release, args=(ReleaseRequest(names[0], tokens[names[0]]),))
    first.start()
    assert store.sending.wait(10)
    others: dict[str, bool | BaseException] = {}
    rest = threading.Thread(target=lambda: others.update(release_in_threads(
        releases, [ReleaseRequest(name, tokens[name], outcome="succeeded") for name in names[1:]])))
    rest.start()
    wait_until(lambda: releases.waiting() == THREADS - 1, timeout=10, what="the other releases to queue")
    store.go.set()
    first.join(10)
    rest.join(10)

    assert store.batches == [1, THREADS - 1]
    assert others == {name: True for name in names[1:]}
    later = TICK + timedelta(minutes=1)
    assert all(store.acquire(name, owner="B", lease=LONG, fire_time=later).acquired for name in names)


def test_each_thread_gets_its_own_answer(store: NotingRedisStore) -> None:
    names = [f"job.{n}" for n in range(THREADS)]
    tokens = taken(store, names)
    stale = set(names[::3])
    requests = [ReleaseRequest(name, tokens[name] + (1 if name in stale else 0)) for name in names]

    answers = release_in_threads(Releases(store), requests)

    assert answers == {name: name not in stale for name in names}
    assert sum(store.batches) == THREADS  # every release went through release_many


def test_a_store_outage_is_raised_in_every_thread_of_its_batch(store: NotingRedisStore) -> None:
    names = [f"job.{n}" for n in range(THREADS)]
    tokens = taken(store, names)
    down = store_from_url("redis://127.0.0.1:1/0?socket_connect_timeout=0.2")
    assert isinstance(down, RedisLockStore)
    try:
        answers = release_in_threads(Releases(down), [ReleaseRequest(name, tokens[name]) for name in names])
    finally:
        down.close()
    assert set(answers) == set(names)
    assert all(isinstance(answer, StoreUnavailable) for answer in answers.values()), answers


def test_a_bad_outcome_is_its_callers_error_not_its_batchs(store: NotingRedisStore) -> None:
    (token,) = taken(store, ["job"]).values()
    with pytest.raises(ValueError, match="exploded"):
        Releases(store).release(ReleaseRequest("job", token, outcome="exploded"))
    assert store.batches == []
    assert Releases(store).release(ReleaseRequest("job", token)) is True


def test_a_store_that_does_not_batch_releases_is_asked_by_each_thread() -> None:
    class NotingMemory(MemoryLockStore):
        def __init__(self) -> None:
            super().__init__()
            self.batches = 0

        def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
            self.batches += 1
            return super().release_many(requests)

    store = NotingMemory()
    names = [f"job.{n}" for n in range(THREADS)]
    tokens = taken(store, names)
    answers = release_in_threads(Releases(store), [ReleaseRequest(name, tokens[name]) for name in names])
    assert answers == {name: True for name in names}
    assert store.batches == 0 and store.batches_releases is False


def test_a_store_answering_too_few_releases_fails_every_thread_and_the_next_batch_still_goes(
        store: NotingRedisStore) -> None:
    class ShortAnswering(NotingRedisStore):
        short = True

        def release_many(self, requests: Sequence[ReleaseRequest]) -> list[bool | StoreUnavailable]:
            answers = super().release_many(requests)
            return answers[:-1] if self.short else answers

    short = ShortAnswering(store.client, prefix=store.prefix)
    names = [f"job.{n}" for n in range(THREADS)]
    tokens = taken(short, names)
    releases = Releases(short)

    answers = release_in_threads(releases, [ReleaseRequest(name, tokens[name]) for name in names])

    assert set(answers) == set(names)
    assert all(isinstance(answer, RuntimeError) and "release_many answered" in str(answer)
               for answer in answers.values()), answers
    short.short = False
    assert releases.release(ReleaseRequest("job.0", tokens["job.0"])) is False  # released by the short batch

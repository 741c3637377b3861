"""The Redis task backend: the TaskQueue contract, plus what only Redis has (keys, scripts, wake-ups, claims).

Every test has its own key prefix (tests/conftest.py), so tests never see each other's tasks.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest
import redis
from redis.crc import key_slot

from mutexcron.errors import StoreConfigError, StoreUnavailable
from mutexcron.tasks import NewTask, TaskQueue, TaskStatus
from mutexcron.tasks.backends.redis.backend import HASH_TAG, RedisTaskBackend
from tests.support import wait_until
from tests.support.tcp_proxy import TcpProxy
from tests.tasks.contract import LATE, Recorder, TaskQueueContract, due_time, queue_factory

UNKNOWN_ID = "0123456789abcdef0123456789abcdef"


class TestRedisTaskQueue(TaskQueueContract):
    @pytest.fixture
    def queue_url(self, redis_tasks_url: str) -> str:
        return redis_tasks_url

    @pytest.fixture
    def unreachable_url(self) -> str:
        return "redis://:secret@127.0.0.1:1/0"


# -- helpers -------------------------------------------------------------------------------------------


@pytest.fixture
def backends(redis_tasks_url: str) -> Iterator[Callable[..., RedisTaskBackend]]:
    """``backends(**options)``: RedisTaskBackend objects on this test's prefix, closed afterwards."""
    made: list[RedisTaskBackend] = []

    def make(**options: Any) -> RedisTaskBackend:
        backend = RedisTaskBackend.from_url(redis_tasks_url, **options)
        made.append(backend)
        return backend

    yield make
    for backend in made:
        backend.close()


@pytest.fixture
def recorder() -> Recorder:
    return Recorder("redis.task")


@pytest.fixture
def queues(redis_tasks_url: str, recorder: Recorder) -> Iterator[Callable[..., TaskQueue]]:
    """``queues(url_or_backend=None)``: TaskQueues with the recorder's handlers; closed (workers stopped) after."""
    with queue_factory(recorder.handlers, redis_tasks_url) as make:
        yield make


def new_task(task_id: str, task_type: str = "redis.task", payload: str = "null", delay: float = 0.0) -> NewTask:
    return NewTask(task_id, task_type, payload, datetime.now(UTC) + timedelta(seconds=delay))


def claim(backend: RedisTaskBackend, types: list[str], *, limit: int = 10, visibility: float = 30.0,
          owner: str = "test-worker") -> list[Any]:
    """One claim, as a worker makes it (without a worker): the deliveries."""
    _, _, deliveries = backend.claim_batch(types, limit, owner, [round(visibility * 1000)] * len(types))
    return deliveries


def claims_of(backend: RedisTaskBackend) -> list[tuple[int, int]]:
    """What each claim of ``backend`` (a worker's) found, in order: (tasks claimed, next_ms). A worker whose
    last claim found nothing waits, until that next_ms (-1: none known, max_idle) or a wake-up."""
    found: list[tuple[int, int]] = []
    original = backend.claim_batch

    def watched(*args: Any, **kwargs: Any) -> Any:
        now_ms, next_ms, deliveries = original(*args, **kwargs)
        found.append((len(deliveries), next_ms))
        return now_ms, next_ms, deliveries

    backend.claim_batch = watched  # type: ignore[method-assign]
    return found


# -- URLs and configuration --------------------------------------------------------------------------


def test_from_url_reads_the_prefix_and_the_database(redis_server_url: str) -> None:
    backend = RedisTaskBackend.from_url("redis://127.0.0.1:6379/3?prefix=app:one:")
    try:
        assert backend.prefix == "app:one:"
        assert backend.task_key("send-sms", "abc") == "app:one:{tasks:send-sms}:task:abc"
        assert backend.due_key("send-sms") == "app:one:{tasks:send-sms}:due"
        assert backend.client.connection_pool.connection_kwargs["db"] == 3
    finally:
        backend.close()


def test_the_default_prefix_is_mutexcron() -> None:
    backend = RedisTaskBackend.from_url("redis://127.0.0.1:6379/0")
    try:
        assert backend.processing_key("t") == "mutexcron:{tasks:t}:processing"
        assert backend.types_key == "mutexcron:{tasks}:types"
    finally:
        backend.close()


def test_a_task_queue_url_picks_the_redis_backend(redis_tasks_url: str) -> None:
    queue = TaskQueue(redis_tasks_url)
    try:
        assert isinstance(queue.backend, RedisTaskBackend)
    finally:
        queue.close()


@pytest.mark.parametrize("url, message", [
    ("redis://127.0.0.1:6379/0?prefix=a{b}:", "braces"),
    ("redis://127.0.0.1:6379/nine", "not a number"),
    ("redis://127.0.0.1:notaport/0", "port"),
])
def test_a_malformed_url_is_rejected(url: str, message: str) -> None:
    with pytest.raises(StoreConfigError, match=message):
        RedisTaskBackend.from_url(url)


def test_cancel_store_is_rejected_because_redis_cancels_atomically(redis_tasks_url: str) -> None:
    with pytest.raises(StoreConfigError, match="no cancel_store"):
        TaskQueue(redis_tasks_url, cancel_store="redis://:secret@127.0.0.1:6379/0")


def test_the_password_never_shows_in_repr_or_errors() -> None:
    backend = RedisTaskBackend.from_url("redis://:s3cret-pw@127.0.0.1:1/0?prefix=x:")
    try:
        assert "s3cret-pw" not in repr(backend)
        with pytest.raises(StoreUnavailable) as caught:
            backend.status(UNKNOWN_ID)
        assert "s3cret-pw" not in str(caught.value)
        assert "127.0.0.1:1" in str(caught.value)
    finally:
        backend.close()


# -- keys ----------------------------------------------------------------------------------------------


def test_the_keys_of_a_task_type_share_its_own_cluster_hash_tag(
    queues: Callable[..., TaskQueue], recorder: Recorder, redis_client: redis.Redis, redis_prefix: str
) -> None:
    """A multi-key script is Redis Cluster safe only if every key it touches is in one slot: each type's keys
    are under that type's tag (so types spread over the shards); only the types set is under ``{tasks}``."""

    def fail(payload: Any) -> None:
        if payload == "fails":
            raise RuntimeError("no")

    first = recorder.define("redis.first", body=fail, max_attempts=1)
    second = recorder.define("redis.second")
    queue = queues()
    queue.start([first])
    queue.schedule(second, "waits", delay=timedelta(hours=1))
    queue.schedule(first, "runs")
    failed_id = queue.schedule(first, "fails")
    wait_until(lambda: queue.status(failed_id) == TaskStatus.FAILED)
    keys = set(redis_client.scan_iter(match=redis_prefix + "*"))
    assert {key for key in keys if HASH_TAG in key} == {f"{redis_prefix}{HASH_TAG}:types"}
    for task_type in (first, second):
        tag = f"{redis_prefix}{{tasks:{task_type}}}:"
        of_type = {key for key in keys if key.startswith(tag)}
        assert {key_slot(key.encode()) for key in of_type} == {key_slot(f"{tag}due".encode())}
    kinds = {key.rpartition("}:")[2].split(":")[0] for key in keys}
    assert kinds == {"task", "due", "failed", "types"}, keys
    tags = {key_slot(f"{redis_prefix}{{tasks:{task_type}}}:".encode()) for task_type in (first, second)}
    assert len(tags) == 2, "two types, two slots"


def test_a_task_is_a_hash_with_its_fields(
    backends: Callable[..., RedisTaskBackend], redis_client: redis.Redis
) -> None:
    backend = backends()
    backend.enqueue([new_task("t1", payload='{"a":1}', delay=60)])
    fields = redis_client.hgetall(backend.task_key("redis.task", "t1"))
    assert fields["type"] == "redis.task" and fields["payload"] == '{"a":1}'
    assert (fields["status"], fields["attempts"], fields["claims"]) == ("scheduled", "0", "0")
    assert fields["run_at"] == fields["due"]
    assert redis_client.zscore(backend.due_key("redis.task"), "t1") == int(fields["run_at"])


def test_the_trace_context_is_a_field_of_the_hash_and_comes_back_with_the_attempts_due_time(
    backends: Callable[..., RedisTaskBackend], redis_client: redis.Redis
) -> None:
    backend = backends()
    trace = '{"traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}'
    plain = new_task("plain", delay=-1)
    backend.enqueue([NewTask("traced", "redis.task", "1", plain.run_at, trace_context=trace), plain])
    assert redis_client.hget(backend.task_key("redis.task", "traced"), "trace_context") == trace
    assert redis_client.hget(backend.task_key("redis.task", "plain"), "trace_context") is None
    assert redis_client.smembers(backend.types_key) == {"redis.task"}
    deliveries = {delivery.id: delivery for delivery in claim(backend, ["redis.task"])}
    assert deliveries["traced"].trace_context == {"traceparent": json.loads(trace)["traceparent"]}
    assert deliveries["plain"].trace_context is None
    for delivery in deliveries.values():
        assert delivery.due is not None and abs(delivery.due - plain.run_at) < timedelta(milliseconds=2)
    assert backend.pending_counts() == {"redis.task": 0}  # a type that had tasks stays, at 0


def test_a_succeeded_or_cancelled_task_expires_after_the_retention_but_a_failed_one_is_kept(
    backends: Callable[..., RedisTaskBackend], redis_client: redis.Redis
) -> None:
    backend = backends(retention=timedelta(days=7))
    backend.enqueue([new_task("ok"), new_task("bad"), new_task("gone", delay=60)])
    for delivery in claim(backend, ["redis.task"]):
        if delivery.id == "ok":
            delivery.ack()
        else:
            delivery.fail("Traceback: boom")
    assert backend.cancel("gone")
    week_ms = 7 * 24 * 3600 * 1000
    assert week_ms - 60_000 < redis_client.pttl(backend.task_key("redis.task", "ok")) <= week_ms
    assert week_ms - 60_000 < redis_client.pttl(backend.task_key("redis.task", "gone")) <= week_ms
    assert redis_client.pttl(backend.task_key("redis.task", "bad")) == -1
    assert redis_client.zrange(backend.failed_key("redis.task"), 0, -1) == ["bad"]
    assert backend.failed() == ["bad"]
    info = backend.info("bad")
    assert info is not None and info.status == TaskStatus.FAILED and info.error == "Traceback: boom"


def test_enqueue_does_not_overwrite_an_existing_task(backends: Callable[..., RedisTaskBackend]) -> None:
    backend = backends()
    backend.enqueue([new_task("same", payload='"first"', delay=60)])
    backend.enqueue([new_task("same", payload='"second"', delay=0)])
    info = backend.info("same")
    assert info is not None and info.payload == "first"


# -- claims --------------------------------------------------------------------------------------------


def test_a_claim_takes_due_tasks_earliest_first_across_types_up_to_the_limit(
    backends: Callable[..., RedisTaskBackend],
) -> None:
    backend = backends()
    now = datetime.now(UTC)
    backend.enqueue([
        NewTask("a3", "redis.a", "3", now - timedelta(seconds=1)),
        NewTask("b1", "redis.b", "1", now - timedelta(seconds=3)),
        NewTask("a2", "redis.a", "2", now - timedelta(seconds=2)),
        NewTask("later", "redis.a", "9", now + timedelta(hours=1)),
    ])
    deliveries = claim(backend, ["redis.a", "redis.b"], limit=2)
    assert [(d.id, d.task_type, d.payload, d.attempt) for d in deliveries] == [
        ("b1", "redis.b", "1", 1), ("a2", "redis.a", "2", 1)]
    assert [d.id for d in claim(backend, ["redis.a", "redis.b"])] == ["a3"]
    assert claim(backend, ["redis.a", "redis.b"]) == []
    assert backend.status("a2") == TaskStatus.RUNNING
    assert backend.status("later") == TaskStatus.SCHEDULED


def test_concurrent_claims_never_hand_out_a_task_twice(backends: Callable[..., RedisTaskBackend]) -> None:
    producer = backends()
    producer.enqueue([new_task(f"t{n}") for n in range(2000)])
    got: list[str] = []
    lock = threading.Lock()
    barrier = threading.Barrier(8)

    def take() -> None:
        backend = backends()
        barrier.wait()
        while deliveries := claim(backend, ["redis.task"], limit=7):
            with lock:
                got.extend(d.id for d in deliveries)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert len(got) == 2000 and len(set(got)) == 2000


def test_an_expired_claim_goes_back_to_due_and_the_old_claimant_can_no_longer_finish_it(
    backends: Callable[..., RedisTaskBackend], caplog: pytest.LogCaptureFixture
) -> None:
    """A worker that died (or stalled past its visibility timeout) loses the task to the next claim."""
    backend = backends()
    backend.enqueue([new_task("t")])
    (dead,) = claim(backend, ["redis.task"], visibility=0.2, owner="dead-worker")
    assert claim(backend, ["redis.task"]) == []  # invisible while the claim lasts
    time.sleep(0.25)
    (alive,) = claim(backend, ["redis.task"], owner="alive-worker")
    assert (alive.id, alive.attempt) == ("t", 2)
    info = backend.info("t")
    assert info is not None and info.status == TaskStatus.RUNNING
    assert info.error is not None and "dead-worker did not finish attempt 1" in info.error
    with caplog.at_level(logging.WARNING, logger="mutexcron.tasks.redis"):
        dead.ack()
    assert "claim expired" in caplog.text
    assert backend.status("t") == TaskStatus.RUNNING  # the stale ack changed nothing
    alive.ack()
    assert backend.status("t") == TaskStatus.SUCCEEDED


def test_a_task_due_now_by_the_clients_clock_is_claimed_by_the_next_claim(
    backends: Callable[..., RedisTaskBackend],
) -> None:
    """The scripts round the server's clock to the ms as due times are rounded, so a task due now on the same clock
    is due on the server's even within the millisecond it was sent in (a floored clock is behind a due time rounded
    up there: about one try in four on a fast machine)."""
    backend = backends()
    for n in range(200):
        backend.enqueue([new_task(f"t{n}")])
        assert [delivery.id for delivery in claim(backend, ["redis.task"])] == [f"t{n}"], f"try {n}"


def test_retry_later_puts_the_task_back_after_the_delay_on_the_server_clock(
    backends: Callable[..., RedisTaskBackend], redis_client: redis.Redis
) -> None:
    backend = backends()
    backend.enqueue([new_task("t")])
    (delivery,) = claim(backend, ["redis.task"])
    delivery.retry_later(timedelta(seconds=30), "oops")
    seconds, micros = redis_client.time()
    server_ms = seconds * 1000 + micros // 1000
    score = redis_client.zscore(backend.due_key("redis.task"), "t")
    assert score is not None and abs(score - (server_ms + 30_000)) < 1000
    info = backend.info("t")
    assert info is not None and (info.status, info.attempts, info.error) == (TaskStatus.SCHEDULED, 1, "oops")
    assert redis_client.zcard(backend.processing_key("redis.task")) == 0
    assert backend.cancel("t") is True  # waiting for a retry, it has not started again: it can be cancelled


def test_the_heartbeat_keeps_a_long_task_from_other_workers(
    queues: Callable[..., TaskQueue], recorder: Recorder
) -> None:
    task_type = recorder.define(body=lambda payload: time.sleep(1.5), visibility_timeout=timedelta(seconds=0.4))
    first = queues()
    first.start()
    task_id = first.schedule(task_type, "long")
    wait_until(lambda: recorder.payloads() == ["long"], what="the task to start")
    queues().start()
    queues().start()
    wait_until(lambda: first.status(task_id) == TaskStatus.SUCCEEDED, timeout=5, what="status succeeded")
    assert recorder.payloads() == ["long"]
    info = first.info(task_id)
    assert info is not None and info.attempts == 1


# -- waking ---------------------------------------------------------------------------------------------


def test_schedule_publishes_a_wake_up_only_when_the_earliest_due_time_moves_earlier(
    backends: Callable[..., RedisTaskBackend], redis_client: redis.Redis
) -> None:
    backend = backends()
    pubsub = redis_client.pubsub(ignore_subscribe_messages=True)
    pubsub.subscribe(backend.channel)
    wait_until(lambda: pubsub.get_message(timeout=0.1) is None and pubsub.subscribed)

    def messages() -> list[str]:
        found = []
        while (message := pubsub.get_message(timeout=0.2)) is not None:
            found.append(message["data"])
        return found

    backend.enqueue([new_task("in10", delay=10)])
    (first,) = messages()
    due_ms, task_type = first.split(" ")
    assert task_type == "redis.task"
    assert abs(int(due_ms) / 1000 - (time.time() + 10)) < 1
    backend.enqueue([new_task("in20", delay=20)])
    assert messages() == []
    backend.enqueue([new_task("in5", delay=5), new_task("in7", delay=7)])
    assert len(messages()) == 1
    backend.enqueue([new_task("other", task_type="redis.other", delay=30)])
    assert [m.split(" ")[1] for m in messages()] == ["redis.other"]
    pubsub.close()


def test_an_idle_worker_does_not_poll(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder
) -> None:
    backend = backends()
    claims = Counter[str]()
    original = backend.claim_batch

    def counting(*args: Any, **kwargs: Any) -> Any:
        claims["claims"] += 1
        return original(*args, **kwargs)

    backend.claim_batch = counting  # type: ignore[method-assign]
    task_type = recorder.define()
    queue = TaskQueue(backend, handlers=recorder.handlers)
    try:
        queue.schedule(task_type, "in an hour", delay=timedelta(hours=1))
        queue.start()
        time.sleep(2.0)
        assert claims["claims"] == 1  # one look, then asleep until the task is due (or a wake-up)
        queue.schedule(task_type, "now")
        recorder.at("now")
        assert claims["claims"] <= 3
    finally:
        queue.close()


def test_a_lost_wake_up_is_made_up_by_the_next_known_due_time(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder
) -> None:
    """Pub/sub is at-most-once; the worker never sleeps past a due time it knows of."""
    task_type = recorder.define()
    worker_backend = backends()
    claims = claims_of(worker_backend)
    worker_queue = TaskQueue(worker_backend, handlers=recorder.handlers)
    deaf = backends()
    deaf.channel += ":nobody-listens"  # its wake-ups are lost
    try:
        # Scheduled before the worker starts, so that its first claim finds it not yet due and learns its due time
        # (a worker already waiting would learn it from the wake-up instead, and claim nothing until then).
        known_due = due_time(worker_queue, worker_queue.schedule(task_type, "known", delay=timedelta(seconds=1.5)))
        worker_queue.start()
        wait_until(lambda: any(found == 0 and next_ms >= 0 for found, next_ms in claims),
                   what="the worker to wait for the due time it knows of")
        deaf.enqueue([new_task("lost", payload='"lost"')])
        lost_at, known_at = recorder.at("lost"), recorder.at("known")
        assert known_due - 0.05 <= lost_at < known_due + LATE  # at the next due time it knew of
        assert known_at < known_due + LATE
    finally:
        worker_queue.close()


def test_a_worker_that_knows_of_nothing_due_still_looks_again_after_max_idle(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder
) -> None:
    recorder.define()
    worker_backend = backends(max_idle=0.7)
    claims = claims_of(worker_backend)
    worker_queue = TaskQueue(worker_backend, handlers=recorder.handlers)
    deaf = backends()
    deaf.channel += ":nobody-listens"
    try:
        worker_queue.start()
        wait_until(lambda: claims[-1:] == [(0, -1)], what="the worker to wait, knowing of nothing due")
        scheduled = time.time()
        deaf.enqueue([new_task("lost", payload='"lost"')])
        assert recorder.at("lost") - scheduled < 0.7 + LATE
    finally:
        worker_queue.close()


def test_a_claim_by_another_worker_tells_sleeping_workers_its_visibility_deadline(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder
) -> None:
    """If the claimant dies, a sleeping worker must wake when its claim expires, not after max_idle."""
    task_type = recorder.define(visibility_timeout=timedelta(seconds=0.5))
    worker_backend = backends(max_idle=60)
    claims = claims_of(worker_backend)
    worker_queue = TaskQueue(worker_backend, handlers=recorder.handlers)
    dying = backends()
    try:
        worker_queue.start()
        wait_until(lambda: claims[-1:] == [(0, -1)], what="the worker to sleep, knowing of nothing due")
        dying.enqueue([new_task("orphan", task_type=task_type, payload='"orphan"')])
        # The worker may win the race for the task; take it from a "dying" claimant only if it did not.
        orphaned = claim(dying, [task_type], visibility=0.5, owner="dying")
        claimed_at = time.time()
        ran_at = recorder.at("orphan")
        if orphaned:
            assert 0.5 - 0.05 <= ran_at - claimed_at < 0.5 + LATE
    finally:
        worker_queue.close()


# -- bad data and outages ----------------------------------------------------------------------------


def test_a_stored_payload_that_is_not_json_fails_the_task_with_a_clear_error(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder
) -> None:
    task_type = recorder.define(max_attempts=1)
    backend = backends()
    backend.enqueue([new_task("garbled", task_type=task_type, payload="{not json")])
    queue = TaskQueue(backend, handlers=recorder.handlers)
    try:
        queue.start()
        wait_until(lambda: queue.status("garbled") == TaskStatus.FAILED, what="status failed")
        info = queue.info("garbled")
        assert info is not None and info.error is not None and "JSONDecodeError" in info.error
        assert info.payload == "{not json"
        assert recorder.payloads() == []
    finally:
        queue.close()


def test_a_due_entry_without_its_task_is_dropped_and_the_other_tasks_run(
    backends: Callable[..., RedisTaskBackend], recorder: Recorder, redis_client: redis.Redis
) -> None:
    task_type = recorder.define()
    backend = backends()
    redis_client.zadd(backend.due_key(task_type), {"ghost": 0})
    queue = TaskQueue(backend, handlers=recorder.handlers)
    try:
        queue.start()
        queue.schedule(task_type, "real")
        recorder.at("real")
        assert redis_client.zscore(backend.due_key(task_type), "ghost") is None
        assert queue.status("ghost") == TaskStatus.UNKNOWN
    finally:
        queue.close()


def test_a_worker_rides_out_a_redis_outage_and_loses_no_task(
    redis_server_url: str, redis_prefix: str, recorder: Recorder
) -> None:
    """The link to Redis is cut while the worker sleeps and tasks are scheduled elsewhere: after it comes
    back, the worker (reconnected, re-subscribed) runs them."""
    task_type = recorder.define()
    server = urlsplit(redis_server_url)
    assert server.hostname and server.port, f"the test Redis URL {redis_server_url!r} must name a host and port"
    proxy = TcpProxy(server.hostname, server.port)
    through_proxy = urlunsplit(server._replace(netloc=f"127.0.0.1:{proxy.port}", query=f"prefix={redis_prefix}"))
    worker_queue = TaskQueue(through_proxy, handlers=recorder.handlers)
    producer = TaskQueue(f"{redis_server_url}?prefix={redis_prefix}", handlers=recorder.handlers)
    try:
        worker_queue.start()
        producer.schedule(task_type, "before")
        recorder.at("before")
        proxy.cut()
        ids = [producer.schedule(task_type, f"during {n}", delay=timedelta(milliseconds=100 * n)) for n in range(3)]
        time.sleep(1.0)
        assert [p for p in recorder.payloads() if p.startswith("during")] == []
        proxy.restore()
        for n in range(3):
            recorder.at(f"during {n}")
        for task_id in ids:
            wait_until(lambda task_id=task_id: producer.status(task_id) == TaskStatus.SUCCEEDED)
        assert Counter(recorder.payloads()) == {"before": 1, "during 0": 1, "during 1": 1, "during 2": 1}
    finally:
        worker_queue.close()
        producer.close()
        proxy.close()


def test_a_worker_started_while_redis_is_down_waits_and_runs_tasks_once_it_returns(
    redis_server_url: str, redis_prefix: str, recorder: Recorder, caplog: pytest.LogCaptureFixture
) -> None:
    """As the scheduler does: one line when the worker finds Redis down at its start, one when it is back."""
    task_type = recorder.define()
    server = urlsplit(redis_server_url)
    assert server.hostname and server.port, f"the test Redis URL {redis_server_url!r} must name a host and port"
    proxy = TcpProxy(server.hostname, server.port)
    through_proxy = urlunsplit(server._replace(netloc=f"127.0.0.1:{proxy.port}", query=f"prefix={redis_prefix}"))
    worker_queue = TaskQueue(through_proxy, handlers=recorder.handlers)
    producer = TaskQueue(f"{redis_server_url}?prefix={redis_prefix}", handlers=recorder.handlers)
    try:
        with caplog.at_level(logging.INFO, logger="mutexcron.tasks"):
            proxy.cut()
            worker_queue.start()
            wait_until(lambda: "task store unreachable" in caplog.text, timeout=10, what="the outage to be logged")
            task_id = producer.schedule(task_type, "while down")
            proxy.restore()
            recorder.at("while down", timeout=10)
            wait_until(lambda: producer.status(task_id) == TaskStatus.SUCCEEDED, what="the task to succeed")
        assert worker_queue.worker_alive
        assert caplog.text.count("task store unreachable") == 1 and caplog.text.count("reachable again") == 1
    finally:
        worker_queue.close()
        producer.close()
        proxy.close()


# -- speed ----------------------------------------------------------------------------------------------


def test_schedule_many_stores_tens_of_thousands_of_tasks_per_second(
    queues: Callable[..., TaskQueue], recorder: Recorder, redis_client: redis.Redis
) -> None:
    task_type = recorder.define()
    queue = queues()
    count = 20_000
    batch = [(task_type, {"n": n}, {"delay": timedelta(hours=1)}) for n in range(count)]
    started = time.perf_counter()
    ids = queue.schedule_many(batch)
    elapsed = time.perf_counter() - started
    print(f"schedule_many: {count} tasks in {elapsed:.3f}s = {count / elapsed:,.0f} tasks/s")
    assert len(set(ids)) == count
    assert redis_client.zcard(queue.backend.due_key(task_type)) == count  # type: ignore[attr-defined]
    assert elapsed < 10  # generous: about 0.4 s on a laptop


def test_throughput_of_one_worker(queues: Callable[..., TaskQueue], recorder: Recorder) -> None:
    task_type = recorder.define()
    queue = queues()
    count = 3000
    queue.schedule_many([(task_type, n) for n in range(count)])
    started = time.perf_counter()
    queue.start(prefetch=50)
    wait_until(lambda: len(recorder.payloads()) >= count, timeout=60, what=f"{count} tasks to run")
    elapsed = time.perf_counter() - started
    print(f"one worker ran {count} tasks in {elapsed:.3f}s = {count / elapsed:,.0f} tasks/s")
    assert sorted(recorder.payloads()) == list(range(count))

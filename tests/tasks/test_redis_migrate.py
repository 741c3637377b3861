"""From the first key layout of the Redis task backend (every key under ``{tasks}``) to one hash tag per type:
mutexcron.tasks.backends.redis.migrate, on tasks written as the first layout kept them."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import pytest
import redis

from mutexcron.errors import StoreConfigError
from mutexcron.tasks import TaskQueue, TaskStatus
from mutexcron.tasks.backends.redis import layout
from mutexcron.tasks.backends.redis import migrate as redis_migrate
from mutexcron.tasks.backends.redis.backend import RedisTaskBackend
from mutexcron.tasks.backends.redis.layout import old_layout_keys
from mutexcron.tasks.backends.redis.migrate import main, migrate_layout
from tests.support import wait_until
from tests.tasks.contract import Recorder

DAY_MS = 24 * 3600 * 1000


def server_ms(client: redis.Redis) -> int:
    seconds, micros = client.time()
    return int(seconds * 1000 + micros // 1000)


def old_hash(client: redis.Redis, prefix: str, task_id: str, task_type: str, status: str, due_ms: int,
             **fields: object) -> str:
    """A task's hash as the first layout wrote it (no set entry); returns its key."""
    key = f"{prefix}{{tasks}}:task:{task_id}"
    client.hset(key, mapping={"type": task_type, "payload": f'"{task_id}"', "status": status, "run_at": due_ms,
                              "due": due_ms, "attempts": 0, "claims": 0, **fields})  # type: ignore[arg-type]
    return key


def write_first_layout(client: redis.Redis, prefix: str, now_ms: int) -> None:
    """Tasks as the first layout held them: scheduled (one due, one in a day), running, failed and succeeded
    (with its retention as TTL), and a due entry whose task hash is gone."""
    old = f"{prefix}{{tasks}}:"

    def task(task_id: str, task_type: str, status: str, **fields: object) -> None:
        old_hash(client, prefix, task_id, task_type, status, now_ms, **fields)

    task("due-now", "mig.a", "scheduled")
    task("in-a-day", "mig.b", "scheduled")
    client.zadd(f"{old}due:mig.a", {"due-now": now_ms, "ghost": now_ms})
    client.zadd(f"{old}due:mig.b", {"in-a-day": now_ms + DAY_MS})
    task("running", "mig.a", "running", attempts=1, claims=1, owner="old-worker")
    client.zadd(f"{old}processing", {"running": now_ms + 60_000})
    task("broken", "mig.b", "failed", attempts=3, claims=3, error="Traceback: boom")
    client.zadd(f"{old}failed", {"broken": now_ms})
    task("done", "mig.a", "succeeded", attempts=1, claims=1)
    client.pexpire(f"{old}task:done", DAY_MS)
    client.sadd(f"{old}types", "mig.a")  # written by versions since pending counts; not by the first ones


@pytest.fixture
def backend(redis_tasks_url: str, redis_client: redis.Redis, redis_prefix: str) -> Iterator[RedisTaskBackend]:
    write_first_layout(redis_client, redis_prefix, server_ms(redis_client))
    made = RedisTaskBackend.from_url(redis_tasks_url)
    yield made
    made.close()


@pytest.fixture
def bare_backend(redis_tasks_url: str) -> Iterator[RedisTaskBackend]:
    """A backend whose prefix holds nothing yet: each test writes the first layout it needs."""
    made = RedisTaskBackend.from_url(redis_tasks_url)
    yield made
    made.close()


def run_one(backend: RedisTaskBackend, task_type: str, payload: str) -> None:
    """Start a worker of ``task_type`` and wait for it to run the task whose payload is ``payload``."""
    recorder = Recorder(task_type)
    recorder.define(task_type)
    queue = TaskQueue(backend, handlers=recorder.handlers)
    try:
        queue.start([task_type])
        recorder.wait_for(payload)
    finally:
        queue.close()


def test_every_task_moves_to_its_types_tag_with_its_state(
    backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str,
) -> None:
    assert backend.status("due-now") == TaskStatus.UNKNOWN  # not where this version looks
    dry = migrate_layout(backend, dry_run=True)
    assert (dict(dry.moved), dry.orphans) == ({"mig.a": 3, "mig.b": 2}, 0) and "would move 5 tasks" in str(dry)
    assert backend.status("due-now") == TaskStatus.UNKNOWN
    report = migrate_layout(backend)
    assert (dict(report.moved), report.orphans) == ({"mig.a": 3, "mig.b": 2}, 1)
    assert {name: backend.status(name) for name in ("due-now", "in-a-day", "running", "broken", "done")} == {
        "due-now": TaskStatus.SCHEDULED, "in-a-day": TaskStatus.SCHEDULED, "running": TaskStatus.RUNNING,
        "broken": TaskStatus.FAILED, "done": TaskStatus.SUCCEEDED}
    assert DAY_MS - 60_000 < redis_client.pttl(backend.task_key("mig.a", "done")) <= DAY_MS
    assert redis_client.zrange(backend.processing_key("mig.a"), 0, -1) == ["running"]
    assert backend.failed() == ["broken"]
    assert backend.pending_counts() == {"mig.a": 1, "mig.b": 1}
    assert [key for key in redis_client.scan_iter(match=f"{redis_prefix}{{tasks}}:*")] == [backend.types_key]
    assert migrate_layout(backend).moved == {}  # nothing left: running it again is harmless


def test_a_worker_warns_of_tasks_in_the_old_layout_and_runs_them_once_moved(
    backend: RedisTaskBackend, caplog: pytest.LogCaptureFixture,
) -> None:
    recorder = Recorder("mig.a")
    recorder.define("mig.a")
    assert old_layout_keys(backend, ["mig.a"])
    queue = TaskQueue(backend, handlers=recorder.handlers)
    try:
        with caplog.at_level(logging.WARNING, logger="mutexcron.tasks.redis"):
            queue.start(["mig.a"])
            wait_until(lambda: "first key layout" in caplog.text, what="the worker's warning")
        assert "mutexcron.tasks.backends.redis.migrate" in caplog.text
        migrate_layout(backend)  # and wakes the workers of the types it moved
        recorder.wait_for("due-now")
        assert old_layout_keys(backend, ["mig.a"]) == []
    finally:
        queue.close()


def test_the_command_line_moves_them_and_says_how_many(
    backend: RedisTaskBackend, redis_tasks_url: str, capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([redis_tasks_url, "--dry-run"]) == 0 and "would move 5 tasks" in capsys.readouterr().out
    assert main([redis_tasks_url]) == 0
    assert "moved 5 tasks (mig.a: 3, mig.b: 2); 1 ids without a task dropped" in capsys.readouterr().out
    assert main(["redis://:pw@127.0.0.1:1/0"]) == 1 and "pw" not in capsys.readouterr().err


def test_a_cluster_never_held_the_first_layout(cluster_url: str) -> None:
    backend = RedisTaskBackend.from_url(cluster_url)
    try:
        with pytest.raises(StoreConfigError, match="never on a Redis Cluster"):
            migrate_layout(backend)
    finally:
        backend.close()


def test_a_task_an_old_producer_enqueues_while_the_migration_runs_is_moved_and_runs(
    backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The old producer's task lands after the scan of the task hashes has passed, before the old sets are done
    with: the migration must not drop its due entry (its hash would be left in no set, never to run)."""
    real_scan = redis_migrate.scan_keys

    def scan_then_enqueue(client: Any, match: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        yield from real_scan(client, match, *args, **kwargs)
        if match.endswith("task:*"):  # as the first layout's ENQUEUE did: the hash and its due entry
            due = server_ms(redis_client)
            old_hash(redis_client, redis_prefix, "late", "mig.a", "scheduled", due)
            redis_client.zadd(f"{redis_prefix}{{tasks}}:due:mig.a", {"late": due})

    monkeypatch.setattr(redis_migrate, "scan_keys", scan_then_enqueue)
    migrate_layout(backend)
    monkeypatch.undo()
    assert backend.status("late") == TaskStatus.SCHEDULED
    run_one(backend, "mig.a", "late")


def test_a_rerun_schedules_a_task_hash_left_without_its_due_entry_at_its_stored_due_time(
    bare_backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str,
) -> None:
    """What the migration's first version left behind: the hash of a task enqueued during it, its due set deleted."""
    due = server_ms(redis_client) + DAY_MS
    old_hash(redis_client, redis_prefix, "stranded", "mig.a", "scheduled", due)
    report = migrate_layout(bare_backend)
    assert redis_client.zscore(bare_backend.due_key("mig.a"), "stranded") == due
    assert bare_backend.status("stranded") == TaskStatus.SCHEDULED
    assert bare_backend.pending_counts() == {"mig.a": 1}
    assert (dict(report.moved), report.restored) == ({"mig.a": 1}, 1)
    assert str(report).endswith("moved 1 tasks (mig.a: 1); 0 ids without a task dropped; 1 of them found without "
                                "a set entry, placed by status")


def test_a_rerun_makes_a_running_task_left_without_its_claim_due_again_and_lists_a_failed_one(
    bare_backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str,
) -> None:
    """A task an old worker claimed, or failed, during the first version's migration: its processing or failed
    entry deleted. The claim can never be settled (its worker is gone): the task runs again."""
    now = server_ms(redis_client)
    old_hash(redis_client, redis_prefix, "claimed", "mig.a", "running", now - 1000, attempts=1, claims=1,
             owner="old-worker")
    old_hash(redis_client, redis_prefix, "broken", "mig.a", "failed", now - 1000, attempts=3, claims=3,
             error="boom", finished_at=now - 500)
    report = migrate_layout(bare_backend)
    assert bare_backend.failed() == ["broken"]
    assert redis_client.zscore(bare_backend.failed_key("mig.a"), "broken") == now - 500
    run_one(bare_backend, "mig.a", "claimed")
    info = bare_backend.info("claimed")
    assert info is not None and (info.status, info.attempts) == (TaskStatus.SUCCEEDED, 2)
    assert report.restored == 2


def test_a_worker_warns_of_a_task_hash_left_in_the_old_layout_without_its_set(
    bare_backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str, caplog: pytest.LogCaptureFixture,
) -> None:
    key = old_hash(redis_client, redis_prefix, "stranded", "mig.a", "scheduled", server_ms(redis_client))
    assert old_layout_keys(bare_backend, ["mig.a"]) == [key]
    recorder = Recorder("mig.a")
    recorder.define("mig.a")
    queue = TaskQueue(bare_backend, handlers=recorder.handlers)
    try:
        with caplog.at_level(logging.WARNING, logger="mutexcron.tasks.redis"):
            queue.start(["mig.a"])
            wait_until(lambda: key in caplog.text, what="the worker's warning naming the hash")
    finally:
        queue.close()
    migrate_layout(bare_backend)
    assert old_layout_keys(bare_backend, ["mig.a"]) == []


def test_the_keyspace_is_scanned_for_old_task_hashes_until_a_scan_finds_none(
    bare_backend: RedisTaskBackend, redis_client: redis.Redis, redis_prefix: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A SCAN goes over the whole keyspace: a worker start does it only while a first-layout hash may be left."""
    real_scan = layout.scan_keys
    scans: list[str] = []

    def counted(client: Any, match: str, *args: Any, **kwargs: Any) -> Iterator[Any]:
        scans.append(match)
        return real_scan(client, match, *args, **kwargs)

    monkeypatch.setattr(layout, "scan_keys", counted)
    key = old_hash(redis_client, redis_prefix, "stranded", "mig.a", "scheduled", server_ms(redis_client))
    assert old_layout_keys(bare_backend, ["mig.a"]) == [key]
    assert old_layout_keys(bare_backend, ["mig.a"]) == [key] and len(scans) == 2
    redis_client.delete(key)
    assert old_layout_keys(bare_backend, ["mig.a"]) == [] and len(scans) == 3
    assert old_layout_keys(bare_backend, ["mig.a"]) == [] and len(scans) == 3

"""From the first key layout of the Redis task backend (every key under ``{tasks}``) to one hash tag per type:
mutexcron.tasks.backends.redis_migrate, on tasks written as the first layout kept them."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest
import redis

from mutexcron.errors import StoreConfigError
from mutexcron.tasks import TaskQueue, TaskStatus
from mutexcron.tasks.backends.redis import RedisTaskBackend
from mutexcron.tasks.backends.redis_migrate import main, migrate_layout, old_layout_keys
from tests.support import wait_until
from tests.tasks.contract import Recorder

DAY_MS = 24 * 3600 * 1000


def write_first_layout(client: redis.Redis, prefix: str, now_ms: int) -> None:
    """Tasks as the first layout held them: scheduled (one due, one in a day), running, failed and succeeded
    (with its retention as TTL), and a due entry whose task hash is gone."""
    old = f"{prefix}{{tasks}}:"

    def task(task_id: str, task_type: str, status: str, **fields: object) -> None:
        client.hset(f"{old}task:{task_id}", mapping={"type": task_type, "payload": f'"{task_id}"', "status": status,
                                                      "run_at": now_ms, "due": now_ms, "attempts": 0, "claims": 0,
                                                      **fields})  # type: ignore[arg-type]

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
    seconds, micros = redis_client.time()
    write_first_layout(redis_client, redis_prefix, seconds * 1000 + micros // 1000)
    made = RedisTaskBackend.from_url(redis_tasks_url)
    yield made
    made.close()


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
        assert "redis_migrate" in caplog.text
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

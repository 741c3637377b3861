"""The task record store contract on Redis (``mutexcron.tasks.records.redis``, ``cancel_store="redis://…"``),
and what only the Redis store does: the expiry of finished records."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
import redis

from mutexcron._common import MAX_ERROR_CHARS
from mutexcron.tasks import NewTask, TaskStatus
from mutexcron.tasks.records.base import Verdict
from mutexcron.tasks.records.redis import RedisTaskRecords
from tests.tasks.contract import TaskRecordStoreContract


@pytest.fixture
def marks(redis_records: RedisTaskRecords) -> RedisTaskRecords:
    return redis_records


class TestRedisTaskRecords(TaskRecordStoreContract):
    """Every record store guarantee, on the test Redis under this test's own key prefix."""


def test_finished_records_expire_after_the_retention_scheduled_and_failed_ones_are_kept(
    redis_server_url: str, redis_prefix: str
) -> None:
    store = RedisTaskRecords.from_url(f"{redis_server_url}?prefix={redis_prefix}&retention=3600")
    client = redis.Redis.from_url(redis_server_url)
    try:
        in_a_day = datetime.now(UTC) + timedelta(days=1)
        store.create([NewTask("later", "t", "1", in_a_day), NewTask("ok", "t", "1", datetime.now(UTC)),
                      NewTask("bad", "t", "1", datetime.now(UTC))])
        assert client.pttl(store.key("later")) == -1  # until its message arrives, however late
        for task_id, status in (("ok", TaskStatus.SUCCEEDED), ("bad", TaskStatus.FAILED)):
            assert store.claim(task_id, gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
            assert store.finish(task_id, gen=1, status=status, error="E" * 40_000)
        assert 3_590_000 < client.pttl(store.key("ok")) <= 3_600_000
        assert client.pttl(store.key("bad")) == -1
        record = store.get("bad")
        assert record is not None and record.error is not None and len(record.error) <= MAX_ERROR_CHARS + 5  # clipped
        assert store.key("x") == f"{redis_prefix}{{x}}"
    finally:
        store.close()
        client.close()

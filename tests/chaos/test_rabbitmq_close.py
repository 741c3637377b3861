"""RabbitMQ closes the task workers' connections, three times, while they drain 2,000 tasks.

Three task worker processes (tests/tasks/task_worker.py, prefetch 10) consume from a RabbitMQ vhost of this
module's own (``rabbitmqctl add_vhost``; deleted afterwards, with all it holds), their task records in a
redis-server of this module's own. Once 2,000 tasks are queued, ``rabbitmqctl close_all_connections`` on the
vhost closes every connection three times during the drain, each time once every worker is connected
again. Once all are connected after the last close, 300 more tasks are queued: on a slow machine the 2,000 may
be done by the end of rabbitmqctl's seconds, and these can only run on workers that came back. A message
delivered but not acked when its
connection closes goes back to the queue: its task runs twice only if its handler had already run, so the
duplicates are bounded by the unacked messages in flight, prefetch x workers per close. The module runs that
scenario once; each test judges one behaviour from what the workers wrote.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

from tests.chaos.faults import close_vhost_connections, rabbitmq_vhost, redis_server, vhost_connections
from tests.support import wait_until
from tests.tasks.test_task_workers import TASK_TYPE, WorkerBackend, Workers

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

TASKS = 2000
AFTER = 300  # tasks queued once every worker is connected after the last close (numbered from TASKS)
WORKERS = 3
PREFETCH = 10
CLOSE_AFTER = (200, 500, 800)  # tasks run before each close
TASK_SECONDS = 0.01  # 3 workers drain at most 300 tasks a second


@dataclass
class Observed:
    workers: Workers
    closes: list[tuple[float, float]]  # time.time() before and after each close (rabbitmqctl's own start-up between)
    connections_closed: list[int]  # client connections of the vhost just before each close
    drained_in: float

    def runs(self) -> Counter[int]:
        return Counter(entry["n"] for entry in self.workers.ran())


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory = tmp_path_factory.mktemp("rabbitmq-close")
    with redis_server(directory) as records, rabbitmq_vhost() as vhost:
        url = f"amqp://guest:guest@127.0.0.1:5672/{quote(vhost, safe='')}"
        with Workers(directory, WorkerBackend(url, cancel_store=f"{records.url}?prefix=chaos:records:")) as workers:
            for n in range(WORKERS):
                workers.start(f"worker-{n}", "--prefetch", str(PREFETCH), "--task-seconds", str(TASK_SECONDS))
            workers.wait_ready()

            def every_worker_connected() -> list[dict[str, Any]]:  # only the workers' connections: no producer is open
                return wait_until(lambda: (listed := vhost_connections(vhost)) and len(listed) >= WORKERS
                                  and listed, timeout=30, what="every worker to be connected", interval=0.1)

            def schedule(numbers: range) -> None:
                producer = workers.backend.queue()
                try:
                    for start in range(numbers.start, numbers.stop, 500):
                        producer.schedule_many([(TASK_TYPE, {"n": n})
                                                for n in range(start, min(start + 500, numbers.stop))])
                finally:
                    producer.close()

            schedule(range(TASKS))
            started = time.monotonic()
            closes, closed = [], []
            for after in CLOSE_AFTER:
                wait_until(lambda after=after: len(workers.ran()) >= after, timeout=30, what=f"{after} tasks to run")
                closed.append(len(every_worker_connected()))
                asked = time.time()
                close_vhost_connections(vhost)
                closes.append((asked, time.time()))
            every_worker_connected()
            schedule(range(TASKS, TASKS + AFTER))
            wait_until(lambda: len({e["n"] for e in workers.ran()}) >= TASKS + AFTER, timeout=60,
                       what="every task to run")
            drained_in = time.monotonic() - started
            workers.stop()
            yield Observed(workers, closes, closed, drained_in)


def test_the_broker_closes_the_workers_connections(observed: Observed) -> None:
    print(f"client connections closed per close: {observed.connections_closed}")
    assert all(count >= WORKERS for count in observed.connections_closed)
    for worker in observed.workers.members:
        log = worker.log.read_text(errors="replace")
        assert log.count("CONNECTION_FORCED") + log.count("reconnecting") >= len(CLOSE_AFTER), worker.tail()


def test_the_workers_reconnect_and_every_task_runs(observed: Observed) -> None:
    assert set(observed.runs()) == set(range(TASKS + AFTER))
    after_last = [e for e in observed.workers.ran() if e["started_at"] > observed.closes[-1][1]]
    ran_by = {e["worker"] for e in after_last}
    print(f"{TASKS} + {AFTER} tasks drained in {observed.drained_in:.1f}s across {len(CLOSE_AFTER)} closes; "
          f"after the last close {len(after_last)} ran "
          f"({sum(e['n'] < TASKS for e in after_last)} of the first {TASKS}), on {sorted(ran_by)}")
    assert ran_by == {w.name for w in observed.workers.members}, "a worker did not come back after the last close"


def test_a_task_runs_twice_only_where_its_ack_was_lost_with_the_connection(observed: Observed) -> None:
    twice = {n: count for n, count in observed.runs().items() if count > 1}
    bound = PREFETCH * WORKERS * len(CLOSE_AFTER)
    print(f"tasks run twice: {len(twice)} (bound: prefetch {PREFETCH} x {WORKERS} workers x {len(CLOSE_AFTER)} "
          f"closes = {bound}); {sorted(twice)[:20]}")
    assert max(twice.values(), default=1) <= 1 + len(CLOSE_AFTER)
    assert len(twice) <= bound
    # Each second run follows a close that came after the first run: the ack of the first went with it.
    for n in twice:
        first, *again = sorted(e["started_at"] for e in observed.workers.ran() if e["n"] == n)
        assert all(any(first <= done and asked <= later for asked, done in observed.closes) for later in again), (
            n, first, again)

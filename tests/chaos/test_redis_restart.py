"""A Redis server SIGKILLed and started again on its port while a fleet runs on it, twice.

Three scheduler processes (tests/support/fleet_instance) run a per-second job and two task worker processes
(tests/tasks/task_worker.py) consume tasks, all on a redis-server of this module's own, without persistence:
it comes back empty. Each outage is placed in the middle of a second (no fire is in flight when the server
dies) and lasts ``DOWN_FOR`` (and until every instance has logged it); the server then restarts in the middle
of a second. The module runs that scenario once; each test judges one behaviour from what the processes wrote.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron.tasks import TaskQueue
from tests.chaos.faults import BACK, UNREACHABLE, RedisServer, log_lines, redis_server
from tests.chaos.fleets import (
    RAN,
    assert_every_body_ran_under_its_own_lock,
    assert_no_tick_ran_twice,
    first_run_after,
)
from tests.ops.test_fleet_control import at_fraction
from tests.support import next_whole_second_after, wait_until
from tests.tasks.test_task_workers import TASK_TYPE, WorkerBackend, Workers
from tests.test_fleet import Fleet

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

OUTAGES = 2
DOWN_FOR = 3.0  # seconds: three ticks of the job fire while the server is dead
INSTANCES = ("a", "b", "c")


@dataclass
class Outage:
    killed_at: datetime
    restarted_at: datetime
    first_run: dict[str, Any]  # the first tick run after the restart
    task_started_after: float  # seconds from the restart to the start of a task scheduled then


@dataclass
class Observed:
    fleet: Fleet
    workers: Workers
    outages: list[Outage]


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _ran_task(workers: Workers, n: int) -> dict[str, Any] | None:
    return next((entry for entry in workers.ran() if entry["n"] == n), None)


def _outage(server: RedisServer, fleet: Fleet, workers: Workers, producer: TaskQueue, number: int) -> Outage:
    at_fraction(0.3, 0.6)
    killed = server.kill()
    wait_until(lambda: all(len(log_lines(i, UNREACHABLE)) >= number for i in fleet.members), timeout=20,
               what="every instance to log that the store is unreachable")
    time.sleep(max(0.0, killed + DOWN_FOR - 0.5 - time.time()))  # the outage's length is the point here
    at_fraction(0.3, 0.6)
    restarted = server.start()
    producer.schedule(TASK_TYPE, {"n": number})
    ran = wait_until(lambda: _ran_task(workers, number), timeout=10, what=f"task {number} to run after the restart")
    restarted_at = _utc(restarted)
    first_run = wait_until(lambda: first_run_after(fleet, restarted_at), timeout=10,
                           what="a tick to run after the restart")
    wait_until(lambda: all(len(log_lines(i, BACK)) >= number for i in fleet.members), timeout=10,
               what="every instance to log that the store is back")
    return Outage(_utc(killed), restarted_at, first_run, ran["started_at"] - restarted)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory = tmp_path_factory.mktemp("redis-restart")
    (directory / "workers").mkdir()
    with redis_server(directory) as server:
        fleet = Fleet(directory, f"{server.url}?prefix=chaos:lock:")
        workers = Workers(directory / "workers", WorkerBackend(f"{server.url}?prefix=chaos:tasks:"))
        producer = TaskQueue(workers.backend.url, require_handlers=False)  # the workers' processes handle them
        try:
            for name in INSTANCES:
                fleet.start(name)
            for n in range(2):
                workers.start(f"worker-{n}")
            fleet.wait_ready()
            workers.wait_ready()
            producer.schedule(TASK_TYPE, {"n": 0})
            wait_until(lambda: _ran_task(workers, 0), timeout=10, what="a task to run before the first outage")
            wait_until(lambda: len({r["fire_time"] for r in fleet.records() if r["outcome"] == "succeeded"}) >= 2,
                       timeout=10, what="two ticks to run before the first outage")
            outages = [_outage(server, fleet, workers, producer, number) for number in range(1, OUTAGES + 1)]
            last = max(r["fire_time"] for r in fleet.records())
            wait_until(lambda: first_run_after(fleet, last + timedelta(seconds=1)), timeout=10,
                       what="two more ticks after the last outage")
            fleet.stop()
            workers.stop()
            yield Observed(fleet, workers, outages)
        finally:
            producer.close()
            fleet.terminate_all()
            workers.terminate_all()
            print(fleet.report())
            print(workers.report())


def test_no_tick_runs_twice_across_redis_restarts(observed: Observed) -> None:
    assert_no_tick_ran_twice(observed.fleet)


def test_no_body_runs_without_a_lock_while_redis_is_down(observed: Observed) -> None:
    assert_every_body_ran_under_its_own_lock(observed.fleet)
    for outage in observed.outages:
        during = [b for b in observed.fleet.bodies() if outage.killed_at < b["at"] < outage.restarted_at]
        assert during == [], f"bodies ran while the server was dead: {during}"
        skipped = {r["instance"] for r in observed.fleet.records()
                   if r["outcome"] == "skipped_store_error" and outage.killed_at < r["fire_time"] < outage.restarted_at}
        assert skipped == set(INSTANCES), "every instance skips the ticks of the outage"


def test_the_fleet_runs_the_first_tick_after_the_restart(observed: Observed) -> None:
    for outage in observed.outages:
        down = (outage.restarted_at - outage.killed_at).total_seconds()
        late = (outage.first_run["fire_time"] - outage.restarted_at).total_seconds()
        before = max(r["token"] for r in observed.fleet.records() if r["outcome"] in RAN
                     and r["fire_time"] < outage.killed_at)
        print(f"down {down:.1f}s; first tick run {late:.3f}s after the restart, by {outage.first_run['instance']}; "
              f"fencing token {before} before the kill, {outage.first_run['token']} after (the server came back empty)")
        assert outage.first_run["fire_time"] == next_whole_second_after(outage.restarted_at)


def test_task_workers_run_a_task_within_one_tick_of_the_restart(observed: Observed) -> None:
    latencies = [outage.task_started_after for outage in observed.outages]
    print("restart to the start of a task scheduled then: " + ", ".join(f"{s * 1000:.0f} ms" for s in latencies))
    # A worker that failed to claim retries at most a second later (ClaimingConsumer.store_failed); 0.2 s more
    # is the claim itself and the hand-over to the handler on a busy machine.
    assert max(latencies) < 1.2


def test_each_outage_logs_one_error_and_one_back_line_per_instance(observed: Observed) -> None:
    for instance in observed.fleet.members:
        assert len(log_lines(instance, UNREACHABLE)) == OUTAGES, instance.tail()
        assert len(log_lines(instance, BACK)) == OUTAGES, instance.tail()
        errors = [line for line in log_lines(instance, " ERROR ") if UNREACHABLE not in line]
        assert errors == [], f"{instance.name}: other errors: {errors}"
    for worker in observed.workers.members:
        print(f"{worker.name}: {len(log_lines(worker, ' WARNING '))} warnings, {len(log_lines(worker, ' ERROR '))} "
              f"errors over {OUTAGES} outages")

"""``run_on="tasks"`` with real OS processes on Redis: three scheduler instances and two task workers
(tests/tasks/run_on_process.py). Every second one instance wins the tick's lock and enqueues its task; a worker
takes the run over under its own token and runs the body. One body (the first to start once the test drops a
marker) blocks:

- the test SIGKILLs its worker: the task comes back after its visibility timeout, and the other worker, once the
  dead worker's lease ran out, runs the body again with the same fire time and a newer token; every tick's body
  completes exactly once, for each lease the configuration accepts (at least the visibility timeout);
- the test SIGSTOPs its worker past the visibility timeout and the lease, then SIGCONTs it: the other worker runs the
  tick under a newer token only after the stopped worker's lease ran out, and the resumed worker sees
  ``ctx.lock_lost`` (its renewal and release refused).

(The same on PostgreSQL with the Django commands: tests/django/test_run_on_fleet_django.py.)"""

from __future__ import annotations

import signal
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from tests.support import wait_until
from tests.support.fleet import Launcher, LedgerMember
from tests.support.held_body import HOLD_MARKER, STALL_MARKER

pytestmark = pytest.mark.fleet

SCRIPT = Path(__file__).resolve().parent / "run_on_process.py"
VISIBILITY = 2.0  # seconds: the worker's visibility timeout of the job task type
BEFORE, AFTER = 3, 3  # bodies completed before the hold, and after the held tick's retry
EARLY = 0.05  # seconds: how much earlier than its ledger entry a body's take-over may be


class OffloadFleet(Launcher[LedgerMember]):
    """The processes of one test: schedulers and workers, each with its ledger and log in ``directory``."""

    def __init__(self, directory: Path, store: str, tasks: str, lease: float = 10.0) -> None:
        super().__init__(directory, LedgerMember)
        self.store, self.tasks, self.lease = store, tasks, lease

    def start(self, role: str, name: str) -> LedgerMember:
        return self.spawn(name, [sys.executable, str(SCRIPT), "--role", role, "--name", name, "--ledger",
                                 str(self.ledger(name)), "--store", self.store, "--tasks", self.tasks,
                                 "--visibility-timeout", str(VISIBILITY), "--lease", str(self.lease)])

    def role(self, prefix: str) -> list[LedgerMember]:
        return [proc for proc in self.members if proc.name.startswith(prefix)]

    def entries(self, event: str, prefix: str = "") -> list[dict[str, Any]]:
        return [entry for proc in self.role(prefix) for entry in proc.entries(event)]


# The leases the configuration accepts for VISIBILITY: equal to it (the shortest), and well over it.
LEASES = [pytest.param(VISIBILITY, id="lease=visibility"), pytest.param(5 * VISIBILITY, id="lease=5x-visibility")]


@pytest.fixture(params=LEASES)
def fleet(request: pytest.FixtureRequest, tmp_path: Path, redis_url: str,
          redis_tasks_url: str) -> Iterator[OffloadFleet]:
    with OffloadFleet(tmp_path, redis_url, redis_tasks_url, lease=request.param) as fleet:
        yield fleet


def start_the_fleet(fleet: OffloadFleet) -> list[LedgerMember]:
    """Two workers and three schedulers, all ready; the workers."""
    workers = [fleet.start("worker", f"worker-{n}") for n in range(2)]
    for n in range(3):
        fleet.start("scheduler", f"scheduler-{n}")
    fleet.wait_ready()
    return workers


def test_each_tick_runs_once_on_the_workers_even_when_one_is_killed_mid_body(fleet: OffloadFleet) -> None:
    held = hold_and_kill_a_worker(fleet, start_the_fleet(fleet))
    judge_the_run(fleet, held)


def test_a_worker_stopped_past_its_lease_loses_the_tick_to_one_that_starts_after_that_lease(
        fleet: OffloadFleet) -> None:
    workers = start_the_fleet(fleet)
    wait_until(lambda: len(fleet.entries("body")) >= BEFORE, 20, f"{BEFORE} bodies to complete")
    (fleet.directory / STALL_MARKER).touch()
    stalled = wait_until(lambda: next((w for w in workers if w.entries("holding")), None), 10, "a body to hold")
    (held,) = stalled.entries("holding")
    stalled.process.send_signal(signal.SIGSTOP)
    (other,) = [w for w in workers if w is not stalled]
    try:
        (successor,) = wait_until(lambda: [e for e in other.entries("started") if e["fire_time"] == held["fire_time"]],
                                  VISIBILITY + fleet.lease + 15, "the other worker to take the tick over")
    finally:
        stalled.process.send_signal(signal.SIGCONT)
    (abandoned,) = wait_until(lambda: stalled.entries("abandoned"), 20, "the resumed worker to see lock_lost")
    assert abandoned["lock_lost"] and abandoned["fire_time"] == held["fire_time"]
    assert successor["token"] > held["token"], "the takeover reused the stalled worker's token"
    # No two bodies at once while both held the lock: the stalled worker's lease ran at least a lease past its take
    # over (it renewed until the stop), and the successor started only after it ran out. Its ledger entry is written
    # a moment after its take-over (EARLY: that moment, and the store's millisecond rounding).
    started_after = datetime.fromisoformat(successor["at"]) - datetime.fromisoformat(held["at"])
    assert started_after.total_seconds() >= fleet.lease - EARLY, f"the successor started {started_after} after"
    lost = wait_until(lambda: [e for e in stalled.entries("record") if e["fire_time"] == held["fire_time"]], 20,
                      "the resumed worker's record of the tick")
    assert [e["token"] for e in lost] == [held["token"]]
    judge_the_run(fleet, held, redone=successor)


def hold_and_kill_a_worker(fleet: OffloadFleet, workers: list[LedgerMember]) -> dict[str, Any]:
    """Once BEFORE bodies completed, let the next body hold, SIGKILL its worker, and wait for the held tick's
    body to complete on the other worker, then for AFTER more; returns the holding entry."""
    wait_until(lambda: len(fleet.entries("body")) >= BEFORE, 20, f"{BEFORE} bodies to complete")
    (fleet.directory / HOLD_MARKER).touch()
    holder = wait_until(lambda: next((w for w in workers if w.entries("holding")), None), 10, "a body to hold")
    (held,) = holder.entries("holding")
    holder.process.send_signal(signal.SIGKILL)
    holder.process.wait(10)
    (survivor,) = [w for w in workers if w is not holder]
    completed = wait_until(lambda: [e for e in survivor.entries("body") if e["fire_time"] == held["fire_time"]],
                           VISIBILITY + fleet.lease + 15, "the held tick to run again on the other worker")
    assert [e["catch_up"] for e in completed] == [held["catch_up"]]
    assert [e["token"] > held["token"] for e in completed] == [True], "the retry reused the dead worker's token"
    after = len(fleet.entries("body"))
    wait_until(lambda: len(fleet.entries("body")) >= after + AFTER, 20, f"{AFTER} more bodies")
    return held


def judge_the_run(fleet: OffloadFleet, held: dict[str, Any], redone: dict[str, Any] | None = None) -> None:
    """Schedulers stopped, every enqueued tick's body is awaited; then each ran exactly once (the held tick: by the
    other worker, ``redone`` its start if known)."""
    fleet.stop(fleet.role("scheduler"), timeout=20)
    enqueued = {e["fire_time"]: e for e in fleet.entries("record", "scheduler") if e["outcome"] == "enqueued"}
    wait_until(lambda: set(enqueued) <= {e["fire_time"] for e in fleet.entries("body")}, 20,
               "every enqueued tick's body to complete")
    fleet.stop(fleet.role("worker"), timeout=20)
    winners = Counter(e["fire_time"] for e in fleet.entries("record", "scheduler") if e["outcome"] == "enqueued")
    assert [tick for tick, count in winners.items() if count > 1] == [], "a tick enqueued twice"
    bodies = Counter(e["fire_time"] for e in fleet.entries("body"))
    assert [tick for tick, count in bodies.items() if count > 1] == [], "a tick's body completed twice"
    assert set(bodies) == set(enqueued)
    runs = {e["fire_time"]: e for e in fleet.entries("record", "worker") if e["outcome"] == "succeeded"}
    assert {tick: runs[tick]["task_id"] for tick in enqueued} == {t: e["task_id"] for t, e in enqueued.items()}
    started = Counter(e["fire_time"] for e in fleet.entries("started"))
    assert started[held["fire_time"]] == 2, "the held tick ran once more than once"
    if redone is not None:
        assert [e["token"] for e in fleet.entries("body") if e["fire_time"] == held["fire_time"]] == [redone["token"]]
    late = sorted(datetime.fromisoformat(e["at"]) - datetime.fromisoformat(e["fire_time"])
                  for e in fleet.entries("started") if e["fire_time"] != held["fire_time"])
    print(f"{len(enqueued)} ticks enqueued and run once each; the held tick {held['fire_time']} (token "
          f"{held['token']}) ran again after its worker was killed; bodies started after their fire time: median "
          f"{late[len(late) // 2].total_seconds() * 1000:.0f} ms, max {late[-1].total_seconds() * 1000:.0f} ms")

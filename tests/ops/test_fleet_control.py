"""Steering a fleet of real OS processes at run time (issue 9): pause and resume, a schedule change (catch-up after
the whole fleet was down: tests/ops/test_fleet_catch_up.py).

The instances are tests/support/fleet_instance processes, as in tests/test_fleet.py, on Redis and on PostgreSQL
through the Django store (``django://``). The operator is a fourth process (``fleet_instance --operator``)
whose never-started Scheduler pauses, resumes or re-times the job on a line of its standard input and writes,
once the call returned, when it was called and when it returned. The tests judge the fleet from the ledgers,
polled with deadlines. Operator actions are placed in time, never waited out: a pause or resume in the middle
of a second, away from the ticks, so that no fire is in flight when it lands (one that straddles it may go
either way, and rightly); a schedule change after every instance's read of the store's schedules and before
the next tick, so that the store itself must refuse that tick of the old schedule.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import next_whole_second_after, wait_until
from tests.test_fleet import Fleet, Instance, assert_no_fire_ran_twice, now

pytestmark = pytest.mark.fleet

RAN = ("succeeded", "failed")
SECOND = timedelta(seconds=1)
SYNC_INTERVAL = timedelta(seconds=1)
EVERY_TWO_SECONDS = ("--spec", "*/2 * * * * *")
# The catch-up test's schedule: the restarted fleet must be up between the gate and the next tick, and 4 s leaves
# a busy machine (CI runs the soak beside it) room to start three instances on PostgreSQL.
EVERY_FOUR_SECONDS = ("--spec", "*/4 * * * * *")
PERIOD = 4 * SECOND


# -- stores --------------------------------------------------------------------------------------------


@dataclass
class Store:
    """A store URL, and what an instance process needs to reach it (options, environment)."""

    url: str
    options: tuple[str, ...] = ()
    env: dict[str, str] | None = None


@pytest.fixture(scope="module")
def postgres_store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    """A PostgreSQL database of this module's own, migrated once, for the Django store (tests/django/fleet_settings)."""
    from tests.django.fleet_support import Site, postgres_database

    with postgres_database() as database:
        Site(tmp_path_factory.mktemp("migrate"), database).migrate()
        yield Store("django://", ("--django-settings", "tests.django.fleet_settings"),
                    {**database.env, "FLEET_AUTOSTART": "0"})


@pytest.fixture(params=["redis", "postgresql"])
def store(request: pytest.FixtureRequest) -> Store:
    """Each test's own store: a Redis key prefix, or the module's database with no lock in it."""
    if request.param == "redis":
        return Store(request.getfixturevalue("redis_url"))
    store: Store = request.getfixturevalue("postgres_store")
    from tests.django.fleet_support import Database

    assert store.env is not None
    Database("postgresql", store.env["FLEET_DB_NAME"]).query("DELETE FROM mutexcron_lock RETURNING name")
    return store


# -- the fleet and its operator ------------------------------------------------------------------------


class Operator(Instance):
    """``fleet_instance --operator``: one action a line on its standard input."""

    def do(self, command: str, timeout: float = 10.0) -> dict[str, Any]:
        """Send ``command`` and wait for its answer; "called" and "at" (returned) as datetimes."""
        done = len(self.entries("operated"))
        assert self.process.stdin is not None
        self.process.stdin.write(f"{command}\n".encode())
        self.process.stdin.flush()
        answer = wait_until(lambda: self.entries("operated")[done:], timeout, f"the operator to {command}")[0]
        answer["called"] = datetime.fromisoformat(answer["called"])
        return answer


class ControlFleet(Fleet):
    def __init__(self, directory: Path, store: Store) -> None:
        super().__init__(directory, store.url, store.options, store.env)

    def operator(self, name: str = "operator", *options: str) -> Operator:
        operator = self.start(name, "--operator", *options, kind=Operator, stdin=True)
        assert isinstance(operator, Operator)
        return operator

    def runs(self) -> list[dict[str, Any]]:
        return [r for r in self.records() if r["outcome"] in RAN]


@pytest.fixture
def fleet(tmp_path: Path, store: Store) -> Iterator[ControlFleet]:
    with ControlFleet(tmp_path, store) as fleet:
        yield fleet


def fraction(moment: datetime) -> float:
    """Where in its second ``moment`` is (0 at the tick)."""
    return moment.microsecond / 1e6


def at_fraction(low: float, high: float, second: Callable[[datetime], bool] = lambda moment: True) -> datetime:
    """Wait until the clock is between ``low`` and ``high`` in a second that ``second`` accepts."""
    def there() -> datetime | None:
        moment = now()
        return moment if low <= fraction(moment) < high and second(moment) else None

    return wait_until(there, timeout=4, what=f"a moment {low:.2f}-{high:.2f}s into a second", interval=0.005)


def in_mid_second() -> None:
    """Wait for the middle of a second, half a second from the ticks of either side."""
    at_fraction(0.3, 0.6)


def wait_for_a_run(fleet: ControlFleet, after: datetime, timeout: float = 6) -> dict[str, Any]:
    return wait_until(lambda: next((r for r in fleet.runs() if r["fire_time"] > after), None), timeout,
                      f"a run of a tick after {after:%H:%M:%S.%f}")


# -- the tests -----------------------------------------------------------------------------------------


def test_no_run_starts_while_paused_and_runs_resume_within_two_ticks(fleet: ControlFleet) -> None:
    instances = [fleet.start(f"instance-{n}") for n in range(3)]
    operator = fleet.operator()
    wait_for_a_run(fleet, after=fleet.wait_ready())

    in_mid_second()
    paused = operator.do("pause")["at"]
    refused_twice = paused + 2 * SECOND  # every instance fires, and is refused, two ticks of the pause
    wait_until(lambda: all(any(r["fire_time"] > refused_twice for r in i.records()) for i in instances),
               timeout=6, what="every instance to fire two ticks of the pause")
    in_mid_second()
    resume = operator.do("resume")
    first_run = wait_for_a_run(fleet, after=resume["called"], timeout=5)
    fleet.assert_all_alive()
    fleet.stop()

    during = [r for r in fleet.records() if r["fire_time"] > paused and r["started_at"] < resume["called"]]
    assert [r for r in during if r["outcome"] in RAN] == [], "a run started after pause() returned"
    assert {r["outcome"] for r in during} == {"skipped_paused"}
    assert all(sum(r["instance"] == i.name for r in during) >= 2 for i in instances), during
    assert [b for b in fleet.bodies() if paused < b["fire_time"] < resume["called"]] == []
    two_ticks = next_whole_second_after(resume["at"]) + SECOND
    assert first_run["fire_time"] <= two_ticks, f"first run after resume {first_run}; resumed at {resume['at']}"
    print(f"paused at {paused:%H:%M:%S.%f}: {len(during)} fires refused; resumed at {resume['at']:%H:%M:%S.%f}, "
          f"ran again at the tick {first_run['fire_time']:%H:%M:%S}")
    assert_no_fire_ran_twice(fleet)


def test_after_a_schedule_change_no_old_tick_runs_and_each_new_tick_runs_once(fleet: ControlFleet) -> None:
    instances = [fleet.start(f"instance-{n}", "--sync-interval", str(SYNC_INTERVAL.total_seconds()),
                             "--start-gate", str(fleet.gate)) for n in range(3)]
    operator = fleet.operator()
    fleet.wait_built(instances, timeout=15)
    # Started together early in a second, each instance reads the store's schedules that far into every
    # second (every sync_interval from its start). A change made later in a second lands after each one's
    # read and before the next tick: each fires that tick for the old schedule, and the store must refuse it.
    at_fraction(0.05, 0.15)
    fleet.gate.touch()
    ready = fleet.wait_ready()
    reads = max(fraction(i.entries("ready")[0]["at"]) for i in instances)
    assert reads < 0.6, f"the instances took {reads:.3f}s into the second to start"
    wait_for_a_run(fleet, after=ready)

    at_fraction(reads + 0.15, min(reads + 0.4, 0.9), lambda moment: (moment.second + 1) % 3 != 0)
    change = operator.do("schedule */3 * * * * *")
    changed = change["at"]
    first_old = next_whole_second_after(changed)  # not a multiple of 3: a tick of the old schedule alone
    synced = changed + SYNC_INTERVAL
    first_new = next(t for t in (next_whole_second_after(synced) + n * SECOND for n in range(3))
                      if t.second % 3 == 0)
    new_ticks = [first_new, first_new + 3 * SECOND]

    def fired_by_all() -> bool:
        fired = Counter(r["fire_time"] for r in fleet.records() if r["fire_time"] in new_ticks)
        return all(fired[t] == len(instances) for t in new_ticks)

    wait_until(fired_by_all, timeout=12, what="every instance to fire two ticks of the new schedule")
    fleet.assert_all_alive()
    fleet.stop()

    records = fleet.records()
    old = [r for r in records if r["fire_time"].second % 3 != 0]
    old_runs = [r for r in old if r["outcome"] in RAN]
    assert [r for r in old_runs if r["started_at"] >= changed or r["fire_time"] > changed] == [], (
        f"a tick of the old schedule ran after set_schedule() returned at {changed}")
    assert {r["outcome"] for r in old if r["fire_time"] > changed} <= {"skipped_stale_schedule"}
    assert [b for b in fleet.bodies() if b["fire_time"].second % 3 and b["fire_time"] > changed] == []
    for tick in new_ticks:
        of_tick = [r for r in records if r["fire_time"] == tick]
        assert len([r for r in of_tick if r["outcome"] in RAN]) == 1, f"tick {tick:%H:%M:%S}: {of_tick}"
        assert Counter(r["instance"] for r in of_tick) == {i.name: 1 for i in instances}, of_tick
    assert {r["instance"]: r["outcome"] for r in records if r["fire_time"] == first_old} == {
        i.name: "skipped_stale_schedule" for i in instances}, f"the first old tick {first_old:%H:%M:%S}"
    stale = sum(r["outcome"] == "skipped_stale_schedule" for r in records)
    print(f"schedule version {change['schedule_version']} at {changed:%H:%M:%S.%f}; {stale} stale fire(s) "
          f"refused; new ticks {[f'{t:%H:%M:%S}' for t in new_ticks]} each ran once")
    assert change["schedule_version"] >= 1
    assert_no_fire_ran_twice(fleet)

"""``on_busy="buffer_one"`` and ``"replace"`` in a fleet of three OS processes on one store (Redis, PostgreSQL): the
ticks fire on every instance, bodies are longer than the interval between ticks, and whichever instance holds the
running body and whichever fires the next tick, the fleet runs one body at a time, each tick at most once, the
next one right after the last (buffer_one) or once the last was told to stop (replace)."""

from __future__ import annotations

import itertools
from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.ops.test_fleet_control import ControlFleet, postgres_store, store  # noqa: F401 (fixtures)
from tests.ops.test_fleet_control import fleet as fleet  # the fixture
from tests.support import wait_until

pytestmark = pytest.mark.fleet

INSTANCES = ("a", "b", "c")
EVERY_THREE_SECONDS = ("--spec", "*/3 * * * * *")
PERIOD = timedelta(seconds=3)
LEASE = 3.0  # seconds: the holder renews, and so sees a stop request, every second
# How long after a run ends the waiting tick's body starts: it asks again at most every 0.5 s, plus the round
# trips and the start of a worker thread on a machine whose two cores run other fleet tests too.
HAND_OVER = timedelta(seconds=1.5)


def bodies(fleet: ControlFleet, runs: int) -> list[dict[str, Any]]:
    """The first ``runs`` bodies of the fleet, oldest first, each with "began" and "ended" (its line's time)."""
    done = wait_until(lambda: (found := fleet.bodies()) and len(found) >= runs and found, timeout=60,
                      what=f"{runs} bodies to run")
    ran = sorted(({**body, "began": datetime.fromisoformat(body["began"]), "ended": body["at"]} for body in done),
                 key=lambda body: body["began"])
    return ran[:runs]


def assert_one_at_a_time_back_to_back(ran: list[dict[str, Any]]) -> None:
    for earlier, later in itertools.pairwise(ran):
        assert later["began"] >= earlier["ended"], f"{later} began while {earlier} ran"
        assert later["began"] - earlier["ended"] < HAND_OVER, f"{later} began late after {earlier}"


def test_buffer_one_runs_the_waiting_tick_right_after_the_last_and_skips_the_others(fleet: ControlFleet) -> None:
    for name in INSTANCES:
        fleet.start(name, *EVERY_THREE_SECONDS, "--on-busy", "buffer_one", "--body-seconds", "4",
                    "--lease", str(LEASE))
    fleet.wait_ready()
    ran = bodies(fleet, 4)
    fleet.stop()
    assert_one_at_a_time_back_to_back(ran)
    ticks = [body["fire_time"] for body in ran]
    assert ticks == sorted(set(ticks)), "a tick ran twice or out of order"
    assert not any(body["cancelled"] for body in ran)
    everything = Counter(body["fire_time"] for body in fleet.bodies())
    assert [tick for tick, count in everything.items() if count > 1] == []
    # A tick that fired while another waited was skipped as busy, because another tick waits. Each instance decides
    # on its own claim: one whose claim came just before the waiting tick took the lock skips the new tick, one whose
    # claim came just after keeps it for the fleet (a body ends near every fourth tick here), so a tick may be
    # skipped on some instances and run by another; it still runs once (no tick twice, above).
    skipped = [r for r in fleet.records() if r["outcome"] == "skipped_busy" and "shut down" not in r["error"]]
    assert all("another tick waits" in r["error"] for r in skipped), [r["error"] for r in skipped]


def test_replace_stops_the_running_body_and_runs_the_new_tick_once_it_released(fleet: ControlFleet) -> None:
    for name in INSTANCES:
        fleet.start(name, *EVERY_THREE_SECONDS, "--on-busy", "replace", "--body-seconds", "30",
                    "--lease", str(LEASE))
    fleet.wait_ready()
    ran = bodies(fleet, 3)
    fleet.stop()
    assert_one_at_a_time_back_to_back(ran)
    ticks = [body["fire_time"] for body in ran]
    assert ticks == [ticks[0] + n * PERIOD for n in range(3)], "a tick was lost or run out of order"
    for body, replacing in zip(ran, ticks[1:], strict=False):
        # Told at the holder's first renewal after the new tick claimed its place (every lease / 3).
        assert body["cancelled"] and replacing <= body["ended"] < replacing + timedelta(seconds=LEASE), body
    replaced = {r["fire_time"] for r in fleet.records() if r["outcome"] == "replaced"}
    assert set(ticks[:2]) <= replaced

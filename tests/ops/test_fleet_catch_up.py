"""Ticks missed while the whole fleet was down, caught up by each ``catch_up`` policy, by a fleet of real OS
processes on Redis and on PostgreSQL (issue 9; the fleet and its stores are tests/ops/test_fleet_control.py's).
A file of its own: its four runs of half a minute each are a worker's share of the fleet tests."""

from __future__ import annotations

from datetime import timedelta

import pytest

from tests.ops.test_fleet_control import (  # noqa: F401 - fixtures
    EVERY_FOUR_SECONDS,
    PERIOD,
    ControlFleet,
    fleet,
    postgres_store,
    store,
)
from tests.support import wait_until
from tests.test_fleet import assert_no_fire_ran_twice, now

pytestmark = pytest.mark.fleet


# Each policy on Redis; on PostgreSQL the one that runs every missed tick. What a policy does with the missed ticks
# is the scheduler's, from the job's last fire time, which every store's contract reads back (tests/contract.py).
@pytest.mark.parametrize(("store", "policy"), [("redis", "latest"), ("redis", "all"), ("redis", "skip"),
                                               ("postgresql", "all")], indirect=["store"])
def test_ticks_missed_while_the_whole_fleet_was_down_are_caught_up_by_policy(
        fleet: ControlFleet, policy: str) -> None:  # noqa: F811
    job = (*EVERY_FOUR_SECONDS, "--catch-up", policy)
    first = fleet.start("first", *job)
    ready = fleet.wait_ready()
    # Three more instances, built (their imports done) while the first one runs, wait at a gate: they start
    # together once the fleet has been down for three ticks, however slowly a loaded machine built them.
    restarted = [fleet.start(f"instance-{n}", *job, "--start-gate", str(fleet.gate)) for n in range(3)]
    fleet.wait_built(restarted, timeout=30)
    wait_until(lambda: len([r for r in fleet.runs() if r["fire_time"] > ready]) >= 2,
               timeout=3 * PERIOD.total_seconds(), what="the first instance to run two ticks")
    fleet.stop([first])
    last_run = max(r["fire_time"] for r in fleet.runs())
    missed = [last_run + n * PERIOD for n in (1, 2, 3)]
    next_tick = missed[-1] + PERIOD
    wait_until(lambda: now() >= missed[-1] + timedelta(milliseconds=100), timeout=4 * PERIOD.total_seconds(),
               what="three ticks to pass with no instance running")
    fleet.gate.touch()
    wait_until(lambda: all(any(r["fire_time"] == next_tick for r in i.records()) for i in restarted),
               timeout=2 * PERIOD.total_seconds(), what="every new instance to fire the next tick")
    fleet.stop(restarted)  # each one shut down cleanly: it was alive all along

    ready_at = [i.entries("ready")[0]["at"] for i in restarted]
    assert all(at < next_tick for at in ready_at), f"the fleet started too late: {ready_at} for the tick {next_tick}"
    runs = sorted((r for r in fleet.runs() if r["fire_time"] > last_run), key=lambda r: r["started_at"])
    expected = {"latest": missed[-1:], "all": missed, "skip": []}[policy]
    assert [(r["fire_time"], r["catch_up"]) for r in runs] == [
        *((t, True) for t in expected), (next_tick, False)], runs
    bodies = sorted((b["fire_time"], b["catch_up"]) for b in fleet.bodies() if b["fire_time"] > last_run)
    assert bodies == [*((t, True) for t in expected), (next_tick, False)]
    caught_up = [(f"{r['fire_time']:%H:%M:%S}", r["instance"]) for r in runs if r["catch_up"]]
    print(f"catch_up={policy!r}: missed {[f'{t:%H:%M:%S}' for t in missed]}; caught up {caught_up}")
    assert_no_fire_ran_twice(fleet)

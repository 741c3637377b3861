"""Two operators backfill the same range at once, each in its own OS process (``fleet_instance --operator``),
on Redis and on PostgreSQL (the Django store): every tick of the range runs exactly once in total, neither
backfill stops early while the other holds the job's lock for longer than its lease, and the two counts
``Scheduler.backfill`` returns add up to the range's ticks (issue 21)."""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

import pytest

from tests.ops.test_fleet_control import (  # noqa: F401 - fixtures
    ControlFleet,
    fleet,
    postgres_store,
    store,
)
from tests.support import wait_until, whole_seconds

pytestmark = pytest.mark.fleet

START = datetime(2026, 1, 5, tzinfo=UTC)
TICKS = 180  # the job fires every second: three minutes of ticks


def test_two_backfills_of_one_range_at_once_run_each_tick_once(fleet: ControlFleet) -> None:  # noqa: F811
    # Each body works 10 ms: the range (180 ticks) takes longer than the job's lease of 2 s, the longest one
    # backfill waits for the job's lock while the other holds it ticking on. A backfill whose peer stalls for a
    # lease without taking a tick stops (docs/backfill.md): 2 s outlasts a process starved on a loaded machine.
    operators = [fleet.operator(f"operator-{n}", "--body-seconds", "0.01", "--lease", "2") for n in range(2)]
    fleet.wait_ready(operators, timeout=15)
    end = START + TICKS * timedelta(seconds=1)
    command = f"backfill {START.isoformat()} {end.isoformat()}\n".encode()
    for operator in operators:  # both at once: each is blocked reading its input
        assert operator.process.stdin is not None
        operator.process.stdin.write(command)
        operator.process.stdin.flush()
    wait_until(lambda: all(o.entries("operated") for o in operators), timeout=120, what="both backfills to return")
    fleet.assert_all_alive()

    bodies = [body for operator in operators for body in operator.entries("body")]
    ran = Counter(body["fire_time"] for body in bodies)
    assert all(body["backfill"] for body in bodies)
    assert sorted(ran) == whole_seconds(START, end - timedelta(seconds=1)), "a tick of the range did not run"
    assert [tick for tick, count in ran.items() if count > 1] == [], "a tick ran twice"
    # Neither stopped early: each operator ran or found taken every tick of the range (a wait for the job's lock
    # that outlasted its lease while the other ticked on is "skipped_busy", and the tick is asked for again).
    for operator in operators:
        decided = {r["fire_time"] for r in operator.records() if r["outcome"] in ("succeeded", "skipped_already_ran")}
        assert sorted(decided) == sorted(ran), f"{operator.name} stopped before the end of the range"
    counts = [operator.entries("operated")[0]["ran"] for operator in operators]
    assert sum(counts) == TICKS, counts
    print(f"{TICKS} ticks backfilled by two operators at once: {counts[0]} and {counts[1]}")

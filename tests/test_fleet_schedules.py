"""Run-time schedules on a fleet of real OS processes: one added by an operator process runs on a three-instance
fleet each tick once, within the instances' sync_interval, and stops when removed (on Redis and on PostgreSQL).

The instances and the operator are tests/support/fleet_instance processes (tests/ops/test_fleet_control.py);
the operator's ``add NAME SPEC`` stores a schedule calling the instances' allowed target, which writes a body line.
"""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timedelta
from typing import Any

import pytest

from tests.ops.test_fleet_control import ControlFleet
from tests.ops.test_fleet_control import fleet as fleet
from tests.ops.test_fleet_control import postgres_store as postgres_store
from tests.ops.test_fleet_control import store as store
from tests.support import wait_until

pytestmark = pytest.mark.fleet

SECOND = timedelta(seconds=1)
SYNC_INTERVAL = timedelta(seconds=1)
NAME = "rt.report"


def bodies(fleet: ControlFleet) -> list[dict[str, Any]]:
    return [b for b in fleet.bodies() if b.get("job") == NAME]


def test_a_schedule_added_at_run_time_runs_each_tick_once_and_stops_when_removed(fleet: ControlFleet) -> None:
    instances = [fleet.start(f"instance-{n}", "--sync-interval", str(SYNC_INTERVAL.total_seconds()))
                 for n in range(3)]
    operator = fleet.operator()
    fleet.wait_ready()

    added = operator.do(f"add {NAME} * * * * * *")
    assert added["definition"] is not None
    first = wait_until(lambda: min((b["fire_time"] for b in bodies(fleet)), default=None), timeout=10,
                       what="a first run of the added schedule")
    assert first <= added["at"] + SYNC_INTERVAL + 2 * SECOND, f"first run at {first}, added at {added['at']}"
    wait_until(lambda: all(any(r["job"] == NAME for r in i.records()) for i in instances), timeout=10,
               what="every instance to fire the added schedule")
    wait_until(lambda: len(bodies(fleet)) >= 4, timeout=10, what="four ticks of the added schedule")

    removed = operator.do(f"remove {NAME}")
    quiet_from = removed["at"] + SYNC_INTERVAL + 2 * SECOND  # every instance has synced and dropped it by then
    wait_until(lambda: any(r["job"] == "fleet.tick" and r["fire_time"] > quiet_from for r in fleet.records()),
               timeout=10, what="the declared job to fire past every instance's next sync")
    fleet.assert_all_alive()
    fleet.stop()

    late = [b for b in bodies(fleet) if b["fire_time"] > removed["at"]]
    assert late == [], f"ticks after remove_schedule returned ran: {late}"
    stale = [r for r in fleet.records() if r["job"] == NAME and r["fire_time"] > removed["at"]]
    assert {r["outcome"] for r in stale} <= {"skipped_stale_schedule"}, stale
    ran = Counter(b["fire_time"] for b in bodies(fleet))
    assert [t for t, n in ran.items() if n > 1] == [], "ticks of the added schedule that ran twice"
    assert {b["label"] for b in bodies(fleet)} == {NAME}
    assert all(isinstance(b["fire_time"], datetime) for b in bodies(fleet))
    print(f"added at {added['at']:%H:%M:%S.%f}, first tick {first:%H:%M:%S}; {len(ran)} ticks each once; "
          f"removed at {removed['at']:%H:%M:%S.%f}, {len(stale)} late fires refused as stale")

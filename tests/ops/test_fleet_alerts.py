"""Alerts across a fleet of real OS processes (issue 10): an overdue or failing job raises one alert for the
whole fleet, however many instances notice it, and one "recovered" once a run succeeds again.

Three tests/support/fleet_instance processes run one per-second job on Redis and on PostgreSQL (the Django store);
each writes the alerts its listeners got to its own ledger. For the overdue case a fourth process, the
operator, holds the job's lock as a hung holder would, then forces it open.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from tests.ops.test_fleet_control import ControlFleet, fleet, postgres_store, store  # noqa: F401  (fixtures)
from tests.support import wait_until

pytestmark = pytest.mark.fleet

# Overdue 2 s after a tick nobody ran: short for the test, long enough that a loaded machine's late ticks (a
# body starting a second late) are not overdue in their own right once the job runs again.
ALERTS = ("--alert-after", "2", "--sync-interval", "0.2")


def alerts(of: ControlFleet) -> Counter[str]:
    return Counter(entry["kind"] for instance in of.members for entry in instance.entries("alert"))


def skips_since(of: ControlFleet, outcome: str) -> int:
    return sum(1 for record in of.records() if record["outcome"] == outcome)


def test_a_job_no_instance_can_run_raises_one_overdue_alert_and_one_recovery(fleet: ControlFleet) -> None:  # noqa: F811
    operator = fleet.operator()
    fleet.wait_ready()
    operator.do("hold")
    for name in ("a", "b", "c"):
        fleet.start(name, *ALERTS)
    fleet.wait_ready()
    wait_until(lambda: alerts(fleet)["overdue"], timeout=10, what="an overdue alert")
    busy = skips_since(fleet, "skipped_busy")
    wait_until(lambda: skips_since(fleet, "skipped_busy") >= busy + 6, timeout=10, what="two more ticks")
    assert alerts(fleet)["overdue"] == 1, fleet.report()
    operator.do("unlock")
    wait_until(lambda: alerts(fleet)["recovered"], timeout=10, what="the recovery")
    ran = len(fleet.runs())
    wait_until(lambda: len(fleet.runs()) >= ran + 2, timeout=10, what="two more runs")
    assert alerts(fleet) == Counter({"overdue": 1, "recovered": 1}), fleet.report()


def test_a_failing_job_raises_one_alert_and_one_recovery(fleet: ControlFleet, tmp_path: Path) -> None:  # noqa: F811
    broken = tmp_path / "broken"
    broken.touch()
    for name in ("a", "b", "c"):
        fleet.start(name, *ALERTS, "--fail-while", str(broken))
    fleet.wait_ready()
    wait_until(lambda: alerts(fleet)["failing"], timeout=10, what="a failing alert")
    failed = len(fleet.runs())
    wait_until(lambda: len(fleet.runs()) >= failed + 2, timeout=10, what="two more failed runs")
    assert alerts(fleet)["failing"] == 1, fleet.report()
    broken.unlink()
    wait_until(lambda: alerts(fleet)["recovered"], timeout=10, what="the recovery")
    ran = len(fleet.runs())
    wait_until(lambda: len(fleet.runs()) >= ran + 2, timeout=10, what="two more runs")
    assert alerts(fleet) == Counter({"failing": 1, "recovered": 1}), fleet.report()

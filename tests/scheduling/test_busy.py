"""What a fire refused as busy does, for each ``on_busy`` policy and each kind of fire (the table of
:mod:`mutexcron.scheduling.busy`); the waits themselves are tested in test_overlap.py, test_scheduler.py and the
overlap and catch-up contracts."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mutexcron.records import Outcome
from mutexcron.registry import Registry, mutex_cron
from mutexcron.running.heartbeats import Heartbeats
from mutexcron.running.pings import Pings
from mutexcron.scheduling.busy import BusyPlan, busy_plan, busy_skip
from mutexcron.scheduling.fires import Fire, FireKind
from mutexcron.scheduling.lifecycle import Generation
from mutexcron.stores import AcquireStatus, Acquisition, MemoryLockStore

TICK = datetime(2026, 3, 1, 2, 0, tzinfo=UTC)
LEASE = timedelta(seconds=90)
GRACE = timedelta(seconds=1)
SLOT, WAIT_LEASE, GRACE_ONLY, AT_ONCE = (BusyPlan(True, timedelta(0)), BusyPlan(False, LEASE),
                                         BusyPlan(False, GRACE), BusyPlan(False, timedelta(0)))


def fire_of(on_busy: str, kind: FireKind) -> Fire:
    registry = Registry()
    mutex_cron("0 2 * * *", name="reports.nightly", registry=registry, lease=LEASE, on_busy=on_busy)(  # type: ignore[arg-type]
        lambda: None)
    life = Generation(Heartbeats(MemoryLockStore()), lambda: None, Pings())
    return Fire(registry.get("reports.nightly"), TICK, None, life, kind)


@pytest.mark.parametrize(("on_busy", "kind", "plan"), [
    ("buffer_one", FireKind.SCHEDULED, SLOT),
    ("replace", FireKind.SCHEDULED, SLOT),
    ("wait", FireKind.SCHEDULED, WAIT_LEASE),
    ("skip", FireKind.SCHEDULED, GRACE_ONLY),
    ("raise", FireKind.SCHEDULED, GRACE_ONLY),
    *[(policy, FireKind.CATCH_UP, WAIT_LEASE) for policy in ("skip", "raise", "wait", "buffer_one", "replace")],
    *[(policy, FireKind.BACKFILL, WAIT_LEASE) for policy in ("skip", "raise", "wait", "buffer_one", "replace")],
    ("skip", FireKind.MANUAL, AT_ONCE),
    ("raise", FireKind.MANUAL, AT_ONCE),
    ("buffer_one", FireKind.MANUAL, AT_ONCE),
    ("replace", FireKind.MANUAL, AT_ONCE),
    ("wait", FireKind.MANUAL, WAIT_LEASE),
])
def test_each_policy_and_kind_of_fire_has_one_plan(on_busy: str, kind: FireKind, plan: BusyPlan) -> None:
    assert busy_plan(fire_of(on_busy, kind), GRACE) == plan


def test_the_skip_of_a_busy_fire_names_the_holder(caplog: pytest.LogCaptureFixture) -> None:
    skip = busy_skip(fire_of("raise", FireKind.MANUAL), Acquisition(AcquireStatus.BUSY, holder="web-2"))

    assert (skip.outcome, skip.why) == (Outcome.SKIPPED_BUSY, "lock held by web-2")
    assert [record.levelname for record in caplog.records] == ["ERROR"]  # on_busy="raise": an error

"""A Redis master SIGKILLed under a fleet, and failed over: on a private Sentinel group and on a private cluster.

Three scheduler processes (tests/fleet_instance.py) run a per-second job whose body works 0.3 s, on a topology of
this module's own (tests/scale_out.py: never the shared one, which the suite beside this one uses). A fourth actor,
the test, SIGKILLs the master that holds the job's lock right after a tick fired, waits for the replica to be
promoted, and starts the dead node again as a replica of the new master (as an operator or a supervisor would;
with a single replica per master, ``wait_replicas=1`` cannot be met until then). The fleet itself is not touched.

Each scenario (Sentinel or cluster, with or without ``wait_replicas=1``) runs once per module; its tests judge it:
the fleet carries on by itself, the ticks of the failover are ``skipped_store_error``, and with ``wait_replicas``
no tick runs twice. Without it, a lock written to the master just before it died may be lost (replication is
asynchronous): how often a tick ran twice is measured and printed, not asserted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.chaos.fleets import RAN, assert_every_body_ran_under_its_own_lock, assert_no_tick_ran_twice, first_run_after
from tests.scale_out import PrivateCluster, PrivateSentinel
from tests.support import wait_until
from tests.test_fleet import Fleet
from tests.test_fleet_control import at_fraction

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

INSTANCES = ("a", "b", "c")
PREFIX = "failover:lock:"
LEASE = 3.0  # seconds: a release lost with the master leaves the lock held until its lease ends
JOB_KEY = PREFIX + "{fleet.tick}"
Topology = PrivateSentinel | PrivateCluster


@dataclass
class Observed:
    kind: str
    wait_replicas: bool
    fleet: Fleet
    killed_at: datetime
    promoted_at: datetime  # when the topology named a new master
    replica_back_at: datetime  # when the dead node was started again, as a replica
    first_run: dict[str, Any]  # the first tick run after the kill

    def runs(self) -> list[dict[str, Any]]:
        return [r for r in self.fleet.records() if r["outcome"] in RAN]

    def duplicates(self) -> list[datetime]:
        counts = Counter(r["fire_time"] for r in self.runs())
        return sorted(tick for tick, n in counts.items() if n > 1)


def _utc(timestamp: float) -> datetime:
    return datetime.fromtimestamp(timestamp, UTC)


def _master(topology: Topology) -> int | None:
    if isinstance(topology, PrivateSentinel):
        return topology.master()
    try:
        return topology.master_of(JOB_KEY)
    except AssertionError:  # no live node knows yet
        return None


def _runs_after(fleet: Fleet, moment: datetime) -> int:
    return len({r["fire_time"] for r in fleet.records() if r["outcome"] in RAN and r["fire_time"] > moment})


def _scenario(kind: str, wait_replicas: bool, directory: Path) -> Iterator[Observed]:
    topology: Topology = PrivateSentinel(directory / "redis") if kind == "sentinel" \
        else PrivateCluster(directory / "redis")
    topology.start()
    url = f"{topology.url}?prefix={PREFIX}" + ("&wait_replicas=1&wait_timeout=500" if wait_replicas else "")
    fleet = Fleet(directory, url)
    try:
        for name in INSTANCES:
            fleet.start(name, "--body-seconds", "0.3", "--lease", str(LEASE))
        started = fleet.wait_ready()
        wait_until(lambda: _runs_after(fleet, started) >= 2, timeout=10, what="two ticks to run before the kill")
        master = _master(topology)
        assert master is not None
        at_fraction(0.005, 0.05)  # the tick's acquire is on its way or just done: the worst moment to lose a write
        killed = _utc(topology.kill(master))
        wait_until(lambda: _master(topology) not in (None, master), timeout=20, what="a replica to be promoted",
                   interval=0.05)
        promoted = datetime.now(UTC)
        topology.restart(master)
        replica_back = datetime.now(UTC)
        first = wait_until(lambda: first_run_after(fleet, killed), timeout=20, what="a tick to run after the failover")
        wait_until(lambda: _runs_after(fleet, first["fire_time"]) >= 3, timeout=15,
                   what="three more ticks after the first one after the failover")
        fleet.assert_all_alive()
        fleet.stop()
        yield Observed(kind, wait_replicas, fleet, killed, promoted, replica_back, first)
    finally:
        fleet.terminate_all()
        topology.close()
        print(fleet.report())


@pytest.fixture(scope="module", params=[("sentinel", True), ("sentinel", False), ("cluster", True), ("cluster", False)],
                ids=["sentinel-wait_replicas", "sentinel", "cluster-wait_replicas", "cluster"])
def observed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    kind, wait_replicas = request.param
    yield from _scenario(kind, wait_replicas, tmp_path_factory.mktemp(f"failover-{kind}"))


def test_the_fleet_carries_on_by_itself_after_the_failover(observed: Observed) -> None:
    first = observed.first_run
    promoted_after = (observed.promoted_at - observed.killed_at).total_seconds()
    resumed_after = (first["fire_time"] - observed.killed_at).total_seconds()
    print(f"{observed.kind}, wait_replicas={int(observed.wait_replicas)}: replica promoted {promoted_after:.2f} s "
          f"after the kill; first tick run {resumed_after:.2f} s after it (by {first['instance']}, token "
          f"{first['token']})")
    # The first tick after the promotion runs (with wait_replicas: once the restarted node is a replica again),
    # unless the tick being run at the kill still holds the lock: its release died with the master, and the
    # lock (replicated) waits for its lease to end.
    since = max(observed.replica_back_at if observed.wait_replicas else observed.promoted_at,
                observed.killed_at + timedelta(seconds=LEASE))
    assert (first["fire_time"] - since).total_seconds() < 3


def test_the_ticks_of_the_failover_are_skipped_as_store_errors(observed: Observed) -> None:
    records = observed.fleet.records()
    during = [r for r in records if observed.killed_at < r["fire_time"] < observed.promoted_at]
    assert during and {r["outcome"] for r in during} == {"skipped_store_error"}, during
    errors = Counter(r["outcome"] for r in records if r["fire_time"] > observed.killed_at
                     and r["fire_time"] < observed.first_run["fire_time"])
    print(f"{observed.kind}, wait_replicas={int(observed.wait_replicas)}: records between the kill and the first "
          f"tick run after it: {dict(errors)}")
    bodies = [b for b in observed.fleet.bodies() if observed.killed_at < b["fire_time"] < observed.promoted_at]
    assert bodies == [], f"bodies ran while no master was there: {bodies}"


def test_every_body_ran_under_a_lock_its_instance_won(observed: Observed) -> None:
    assert_every_body_ran_under_its_own_lock(observed.fleet)


def test_with_wait_replicas_no_tick_runs_twice(observed: Observed) -> None:
    duplicates = observed.duplicates()
    runs = len({r["fire_time"] for r in observed.runs()})
    print(f"{observed.kind}, wait_replicas={int(observed.wait_replicas)}: {len(duplicates)} of {runs} ticks ran "
          f"twice {[d.isoformat() for d in duplicates]}")
    if observed.wait_replicas:
        assert_no_tick_ran_twice(observed.fleet)
    # Without it a lost lock may let a tick run twice; the count above is the measurement.


def test_the_first_tick_after_the_failover_runs_once(observed: Observed) -> None:
    first = observed.first_run["fire_time"]
    assert len([r for r in observed.runs() if r["fire_time"] == first]) == 1


def test_after_the_failover_the_others_see_each_tick_as_already_run(observed: Observed) -> None:
    """The new master has the lock's last fire time: the instances that lose a tick see it already run."""
    ran = {r["fire_time"] for r in observed.runs() if r["fire_time"] > observed.first_run["fire_time"]}
    outcomes = Counter(r["outcome"] for r in observed.fleet.records() if r["fire_time"] in ran)
    assert outcomes["skipped_already_ran"] + outcomes["skipped_busy"] == 2 * len(ran), outcomes

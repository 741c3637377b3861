"""The link between the instances and Redis turns slow (200 ms each way), then breaks for 5 s, then heals.

Three scheduler processes (tests/support/fleet_instance) reach a redis-server of this module's own through a
TcpProxy (tests/support/tcp_proxy.py) in a process of its own (ProxyProcess: the test's polling never slows the link):
first at full speed, then with ``LATENCY`` added to every chunk in each direction, then cut (open connections
reset, new ones refused) for ``CUT_FOR``, then healed (no latency, accepting again). The module runs that
scenario once; each test judges one behaviour from what the processes wrote.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta

import pytest

from tests.chaos.faults import BACK, UNREACHABLE, log_lines, redis_server
from tests.chaos.fleets import RAN, assert_every_body_ran_under_its_own_lock, assert_no_tick_ran_twice, first_run_after
from tests.ops.test_fleet_control import at_fraction
from tests.support import next_whole_second_after, wait_until, whole_seconds
from tests.support.tcp_proxy import ProxyProcess
from tests.test_fleet import Fleet, now

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

LATENCY = 0.2  # seconds added to every chunk, in each direction: 400 ms more per round trip
SLOW_TICKS = 4
CUT_FOR = 5.0
INSTANCES = ("a", "b", "c")


@dataclass
class Observed:
    fleet: Fleet
    slow_from: datetime
    cut_at: datetime
    healed_at: datetime

    def ran(self) -> Counter[datetime]:
        return Counter(r["fire_time"] for r in self.fleet.records() if r["outcome"] in RAN)


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory = tmp_path_factory.mktemp("slow-then-cut")
    with (redis_server(directory) as server, ProxyProcess("127.0.0.1", server.port) as proxy,
          Fleet(directory, f"redis://127.0.0.1:{proxy.port}/0?prefix=chaos:lock:") as fleet):
        for name in INSTANCES:
            fleet.start(name)
        fleet.wait_ready()
        wait_until(lambda: len([r for r in fleet.records() if r["outcome"] == "succeeded"]) >= 2,
                   timeout=10, what="two ticks run at full speed")
        at_fraction(0.3, 0.6)
        proxy.latency = LATENCY
        slow_from = now()
        last_slow = next_whole_second_after(slow_from) + timedelta(seconds=SLOW_TICKS - 1)
        wait_until(lambda: last_slow in {r["fire_time"] for r in fleet.records() if r["outcome"] in RAN},
                   timeout=SLOW_TICKS + 10, what=f"{SLOW_TICKS} ticks run through the slow link")
        at_fraction(0.9, 0.95)  # a tick's acquire and release (two slow round trips) are done by then
        proxy.cut()
        cut_at = now()
        time.sleep(CUT_FOR)  # the cut's length is the point here
        proxy.latency = 0.0
        proxy.restore()
        healed_at = now()
        wait_until(lambda: first_run_after(fleet, healed_at), timeout=10, what="a tick to run after the heal")
        wait_until(lambda: all(log_lines(i, BACK) for i in fleet.members), timeout=10,
                   what="every instance to log that the store is back")
        wait_until(lambda: first_run_after(fleet, healed_at + timedelta(seconds=2)), timeout=10,
                   what="two more ticks after the heal")
        fleet.stop()
        yield Observed(fleet, slow_from, cut_at, healed_at)


def test_every_tick_runs_once_through_the_slow_link(observed: Observed) -> None:
    window = whole_seconds(next_whole_second_after(observed.slow_from), observed.cut_at.replace(microsecond=0))
    ran = observed.ran()
    assert [tick for tick in window if ran[tick] != 1] == [], f"ticks not run exactly once in {window}"
    lateness = sorted((b["at"] - b["fire_time"]).total_seconds() for b in observed.fleet.bodies()
                      if b["fire_time"] in set(window))
    print(f"{len(window)} ticks through the slow link, each run once; body end minus fire time "
          f"{lateness[0] * 1000:.0f}-{lateness[-1] * 1000:.0f} ms")


def test_no_body_runs_while_the_link_is_cut(observed: Observed) -> None:
    assert_every_body_ran_under_its_own_lock(observed.fleet)
    # A body whose lock was won just before the cut may end a moment after it (its body takes a millisecond).
    during = [b for b in observed.fleet.bodies()
              if observed.cut_at + timedelta(seconds=0.1) < b["at"] < observed.healed_at]
    assert during == [], f"bodies ran while the link was cut: {during}"
    cut_ticks = whole_seconds(next_whole_second_after(observed.cut_at), observed.healed_at.replace(microsecond=0))
    outcomes = Counter(r["outcome"] for r in observed.fleet.records() if r["fire_time"] in set(cut_ticks))
    print(f"{len(cut_ticks)} ticks fired during the {CUT_FOR:.0f}s cut: {dict(outcomes)}")
    assert set(outcomes) == {"skipped_store_error"}
    assert outcomes["skipped_store_error"] == len(cut_ticks) * len(INSTANCES)


def test_the_fleet_runs_the_first_tick_after_the_link_heals(observed: Observed) -> None:
    first = first_run_after(observed.fleet, observed.healed_at)
    assert first is not None
    assert first["fire_time"] == next_whole_second_after(observed.healed_at)
    for instance in observed.fleet.members:
        assert len(log_lines(instance, UNREACHABLE)) == 1, instance.tail()
        assert len(log_lines(instance, BACK)) == 1, instance.tail()


def test_no_tick_runs_twice_through_a_slow_then_broken_link(observed: Observed) -> None:
    assert_no_tick_ran_twice(observed.fleet)

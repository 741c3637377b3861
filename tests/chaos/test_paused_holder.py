"""A lock holder paused with SIGSTOP past its lease, then continued with SIGCONT.

Three scheduler processes (tests/support/fleet_instance) share a redis-server of this module's own. The job fires
every second, holds a 1.5 s lease and works for 4 s; its body writes its fencing token to a sink (a Redis key
that takes a write only if its token is at least the highest it has seen) when it starts and when it ends.
The first instance to run the job is stopped at once, and continued as soon as another instance has taken the
lock. The module runs that scenario once; each test judges one behaviour from what the processes wrote.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import pytest
import redis

from mutexcron.stores import store_from_url
from tests.chaos.faults import log_lines, redis_server
from tests.chaos.fleets import assert_every_body_ran_under_its_own_lock, assert_no_tick_ran_twice
from tests.support import wait_until
from tests.support.fleet_instance.tick import FENCE_WRITES_KEY, JOB_NAME
from tests.test_fleet import Fleet, Instance, now

pytestmark = [pytest.mark.chaos, pytest.mark.fleet]

LEASE = 1.5
WORK = 4.0


@dataclass
class Observed:
    fleet: Fleet
    holder: Instance
    held: dict[str, Any]  # the paused holder's "fenced" begin line (its token, its tick)
    successor: dict[str, Any]  # the "fenced" begin line of the run that took the lock meanwhile
    stopped_at: datetime
    continued_at: datetime
    sink: list[tuple[str, int, str]]  # the writes the sink accepted: (instance, token, phase), in order
    store_url: str

    def holder_lines(self, phase: str) -> list[dict[str, Any]]:
        return [e for e in self.holder.entries("fenced") if e["phase"] == phase and e["token"] == self.held["token"]]

    def holder_record(self) -> dict[str, Any]:
        return next(r for r in self.holder.records() if r["token"] == self.held["token"] and r["outcome"])


def _fenced(fleet: Fleet, phase: str) -> list[dict[str, Any]]:
    return [e for i in fleet.members for e in i.entries("fenced") if e["phase"] == phase]


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    directory = tmp_path_factory.mktemp("paused-holder")
    with redis_server(directory) as server, Fleet(directory, f"{server.url}?prefix=chaos:lock:") as fleet:
        for name in ("a", "b", "c"):
            fleet.start(name, "--lease", str(LEASE), "--body-seconds", str(WORK), "--fence", server.url)
        fleet.wait_ready()
        held = wait_until(lambda: next(iter(_fenced(fleet, "begin")), None), timeout=10,
                          what="an instance to start the job")
        holder = next(i for i in fleet.members if i.name == held["instance"])
        holder.process.send_signal(signal.SIGSTOP)
        stopped_at = now()
        successor = wait_until(
            lambda: next((e for e in _fenced(fleet, "begin") if e["token"] > held["token"]), None),
            timeout=LEASE + 10, what="another instance to take the lock of the paused holder",
        )
        holder.process.send_signal(signal.SIGCONT)
        continued_at = now()
        wait_until(lambda: any(r["token"] == held["token"] for r in holder.records()), timeout=WORK + 10,
                   what="the paused holder to finish its run")
        wait_until(lambda: any(e["token"] == successor["token"] for e in _fenced(fleet, "end")),
                   timeout=WORK + 10, what="the successor to finish its run")
        fleet.stop()
        client = redis.Redis.from_url(server.url, decode_responses=True)
        writes = client.lrange(FENCE_WRITES_KEY, 0, -1)
        client.close()
        sink = [(instance, int(token), phase) for instance, token, phase in (w.split() for w in writes)]
        yield Observed(fleet, holder, held, successor, stopped_at, continued_at, sink,
                       f"{server.url}?prefix=chaos:lock:")


def test_another_instance_runs_the_next_tick_once_the_paused_holders_lease_ran_out(observed: Observed) -> None:
    successor = observed.successor
    assert successor["instance"] != observed.holder.name
    assert successor["fire_time"] > observed.held["fire_time"]
    assert observed.stopped_at < successor["at"] < observed.continued_at
    waited = (successor["at"] - observed.stopped_at).total_seconds()
    print(f"{observed.holder.name} (token {observed.held['token']}) stopped; {successor['instance']} ran the tick of "
          f"{successor['fire_time']:%H:%M:%S} with token {successor['token']}, {waited:.2f}s after the stop "
          f"(lease {LEASE}s)")
    # The lease ran out at most LEASE after the stop (the holder's last renewal came before it); the next tick
    # after that is at most a second later, and busy_grace (1 s) covers a fire that came just before the end.
    assert waited <= LEASE + 1 + 1 + 0.5


def test_the_paused_holder_sees_that_it_lost_the_lock(observed: Observed) -> None:
    assert observed.holder_record()["lock_lost"] is True
    (end,) = observed.holder_lines("end")
    assert end["lock_lost"] is True  # ctx.lock_lost, seen by the body before its last write
    assert log_lines(observed.holder, "lock lost while the body runs"), observed.holder.tail()


def test_the_paused_holders_release_is_refused(observed: Observed) -> None:
    token = observed.held["token"]
    refused = log_lines(observed.holder, f"lock (token {token}) was no longer ours at release")
    assert len(refused) == 1, observed.holder.tail()
    store = store_from_url(observed.store_url)
    try:
        assert store.release(JOB_NAME, token=token) is False  # and stays refused
        state = store.lock(JOB_NAME)
    finally:
        store.close()
    assert state is not None and state.token >= observed.successor["token"]


def test_the_fencing_sink_accepts_no_write_from_the_stale_holder(observed: Observed) -> None:
    (end,) = observed.holder_lines("end")
    assert end["accepted"] is False
    tokens = [token for _, token, _ in observed.sink]
    assert tokens == sorted(tokens), f"the sink took a lower token after a higher one: {observed.sink}"
    stale = [w for w in observed.sink if w[1] == observed.held["token"] and w[2] == "end"]
    assert stale == []
    refused = [e for i in observed.fleet.members for e in i.entries("fenced") if not e["accepted"]]
    assert [(e["instance"], e["token"]) for e in refused] == [(observed.holder.name, observed.held["token"])]
    print(f"sink accepted {len(observed.sink)} writes; refused only the stale holder's: {refused[0]['phase']} of "
          f"token {observed.held['token']}")


def test_no_tick_runs_twice_when_a_holder_is_paused(observed: Observed) -> None:
    assert_every_body_ran_under_its_own_lock(observed.fleet)
    assert_no_tick_ran_twice(observed.fleet)
    assert observed.holder.process.returncode == 0

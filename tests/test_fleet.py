"""A fleet of real OS processes sharing one lock store: every instance fires every tick, exactly one runs it.

Each instance is tests/support/fleet_instance in its own process, writing its own JSON-lines ledger; the tests
read the ledgers (never a bare sleep: they poll them with a deadline) and judge the fleet from them.
"""

from __future__ import annotations

import sys
from collections import Counter
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from tests.support import next_whole_second_after, wait_until, whole_seconds
from tests.support.fleet import Launcher, LedgerMember

pytestmark = pytest.mark.fleet

SKIPS = {"skipped_already_ran", "skipped_busy"}


# -- helpers -----------------------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


class Instance(LedgerMember):
    """A fleet_instance process: its ledger's complete lines, with their times as datetimes."""

    def entries(self, event: str | None = None) -> list[dict[str, Any]]:
        entries = super().entries(event)
        for entry in entries:
            for key in ("at", "fire_time", "started_at", "finished_at"):
                if entry.get(key):
                    entry[key] = datetime.fromisoformat(entry[key])
        return entries

    def records(self) -> list[dict[str, Any]]:
        return self.entries("record")


class Fleet(Launcher[Instance]):
    """fleet_instance processes on one store (``options`` and ``env``: what each needs to reach it); ``wait_ready``
    returns when the last one started its scheduler."""

    def __init__(self, directory: Path, store_url: str, options: Sequence[str] = (),
                 env: dict[str, str] | None = None) -> None:
        super().__init__(directory, Instance, env)
        self.store_url, self.options = store_url, tuple(options)

    def start(self, name: str, *options: str, kind: type[Instance] = Instance, stdin: bool = False) -> Instance:
        command = [sys.executable, "-m", "tests.support.fleet_instance", "--store", self.store_url, "--instance", name,
                   "--ledger", str(self.ledger(name)), *self.options, *options]
        return self.launch(name, command, {}, kind, stdin)

    def records(self) -> list[dict[str, Any]]:
        return [record for instance in self.members for record in instance.records()]

    def bodies(self) -> list[dict[str, Any]]:
        return [body for instance in self.members for body in instance.entries("body")]


@pytest.fixture(params=["redis", "mongo"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The same tests against each real store (the fixtures give every test its own prefix or database)."""
    return str(request.getfixturevalue(f"{request.param}_url"))


@pytest.fixture
def fleet(tmp_path: Path, store_url: str) -> Iterator[Fleet]:
    with Fleet(tmp_path, store_url) as fleet:
        yield fleet


def assert_no_fire_ran_twice(fleet: Fleet) -> None:
    ran = Counter(r["fire_time"] for r in fleet.records() if r["outcome"] in ("succeeded", "failed"))
    bodies = Counter(b["fire_time"] for b in fleet.bodies())
    assert [t for t, n in ran.items() if n > 1] == [], "fire times run by more than one instance"
    assert [t for t, n in bodies.items() if n > 1] == [], "fire times whose body ran more than once"


# -- the tests ---------------------------------------------------------------------------------------


def test_every_tick_runs_exactly_once_across_four_instances(fleet: Fleet) -> None:
    instances = [fleet.start(f"instance-{n}") for n in range(4)]
    first_tick = next_whole_second_after(fleet.wait_ready())

    def ticks_run() -> int:
        return len({r["fire_time"] for r in fleet.records() if r["outcome"] == "succeeded"
                    and r["fire_time"] >= first_tick})

    wait_until(lambda: ticks_run() >= 11, timeout=20, what="11 ticks run after every instance was ready")
    fleet.assert_all_alive()
    stopped_waiting = now()
    fleet.stop()

    window = whole_seconds(first_tick, (stopped_waiting - timedelta(seconds=0.5)).replace(microsecond=0))
    assert len(window) >= 10
    records = fleet.records()
    for tick in window:
        of_tick = [r for r in records if r["fire_time"] == tick]
        ran = [r["instance"] for r in of_tick if r["outcome"] == "succeeded"]
        assert len(ran) == 1, f"tick {tick} ran on {ran}"
        per_instance = Counter(r["instance"] for r in of_tick)
        assert per_instance == {i.name: 1 for i in instances}, f"tick {tick}: not one record per instance"
        assert {r["outcome"] for r in of_tick if r["instance"] not in ran} <= SKIPS
    runs = Counter(r["instance"] for r in records if r["outcome"] == "succeeded" and r["fire_time"] in window)
    print(f"{len(window)} ticks, each run once; runs per instance: {dict(sorted(runs.items()))}")
    assert_no_fire_ran_twice(fleet)


def test_killed_holder_frees_the_job_within_one_lease(fleet: Fleet) -> None:
    lease = 1.5
    instances = [fleet.start(f"instance-{n}", "--lease", str(lease), "--hang-first") for n in range(3)]
    fleet.wait_ready()

    def holding() -> tuple[Instance, dict[str, Any]] | None:
        found = [(i, e) for i in instances for e in i.entries("holding")]
        assert len(found) <= 1, f"more than one instance is holding: {found}"
        return found[0] if found else None

    holder, hold = wait_until(holding, timeout=10, what="an instance to hang holding the lock")
    others = [i for i in instances if i is not holder]

    # While the holder hangs, only its heartbeat keeps the lock: wait past two leases and see only skips.
    held_past_two_leases = hold["fire_time"] + timedelta(seconds=2 * lease + 0.5)
    wait_until(lambda: all(any(r["fire_time"] >= held_past_two_leases for r in i.records()) for i in others),
               timeout=10, what="the other instances to fire for more than two leases")
    later = [r for r in fleet.records() if r["fire_time"] > hold["fire_time"]]
    assert {(r["outcome"], r["error"]) for r in later} == {("skipped_busy", f"lock held by {holder.name}")}
    assert fleet.bodies() == []

    holder.process.kill()
    killed_at = now()
    holder.process.wait(5)

    def taken_over() -> dict[str, Any] | None:
        return next((b for i in others for b in i.entries("body") if b["fire_time"] > killed_at), None)

    takeover = wait_until(taken_over, timeout=lease + 6, what="another instance to run a tick after the kill")
    latency = (takeover["at"] - killed_at).total_seconds()
    print(f"kill-to-takeover latency: {latency:.3f}s (lease {lease}s)")
    assert latency <= lease + 2, f"took {latency:.2f}s to take over after the kill"
    assert takeover["token"] > hold["token"]  # fencing: the new holder's token supersedes the dead one's
    fleet.stop(others)
    assert_no_fire_ran_twice(fleet)


def test_late_clock_instance_sees_already_ran(fleet: Fleet) -> None:
    """An instance 2 s behind fires each tick after the on-time one ran it: it must skip, not run it again
    (the original NestJS design ran it a second time).

    The late instance joins a fleet already running, so every tick it fires was fired on time first.
    """
    on_time = fleet.start("on-time")
    fleet.wait_ready()
    wait_until(lambda: any(r["outcome"] == "succeeded" for r in on_time.records()), timeout=10,
               what="the on-time instance to run a tick")
    late = fleet.start("late", "--clock-skew", "-2")
    first_tick = next_whole_second_after(fleet.wait_ready())

    def late_fired() -> int:
        return len({r["fire_time"] for r in late.records() if r["fire_time"] >= first_tick})

    wait_until(lambda: late_fired() >= 9, timeout=20, what="the late instance to fire 9 ticks")
    fleet.assert_all_alive()
    stopped_waiting = now()
    fleet.stop()

    window = whole_seconds(first_tick, (stopped_waiting - timedelta(seconds=2.5)).replace(microsecond=0))
    assert len(window) >= 8
    records = fleet.records()
    for tick in window:
        of_tick = sorted((r["instance"], r["outcome"]) for r in records if r["fire_time"] == tick)
        assert of_tick == [("late", "skipped_already_ran"), ("on-time", "succeeded")], f"tick {tick}: {of_tick}"
    late_by = [(r["started_at"] - r["fire_time"]).total_seconds() for r in late.records() if r["fire_time"] in window]
    assert min(late_by) >= 1.9, "the late instance did not fire 2 s late"
    assert {r["outcome"] for r in late.records()} == {"skipped_already_ran"}
    assert late.entries("body") == []
    print(f"{len(window)} ticks run on time; the late instance fired them {min(late_by):.3f}-{max(late_by):.3f}s late")
    assert_no_fire_ran_twice(fleet)


def test_a_late_clock_instance_started_with_the_fleet_loses_no_tick(fleet: Fleet) -> None:
    """Started together, the late instance first runs the old ticks nobody ran yet, at the moment the
    on-time instance fires the current one. The current tick waits out that short run (busy_grace)
    instead of being skipped, so no tick in the window is lost and none runs twice."""
    on_time = fleet.start("on-time")
    fleet.start("late", "--clock-skew", "-2")
    first_tick = next_whole_second_after(fleet.wait_ready())

    def run_ticks() -> int:
        return len({r["fire_time"] for r in on_time.records() if r["fire_time"] >= first_tick})

    wait_until(lambda: run_ticks() >= 12, timeout=25, what="12 ticks fired on time")
    fleet.assert_all_alive()
    stopped_waiting = now()
    fleet.stop()

    window = whole_seconds(first_tick, (stopped_waiting - timedelta(seconds=2.5)).replace(microsecond=0))
    assert len(window) >= 8
    runs = Counter(r["fire_time"] for r in fleet.records() if r["outcome"] == "succeeded")
    assert [tick for tick in window if runs[tick] != 1] == [], fleet.report()
    assert_no_fire_ran_twice(fleet)

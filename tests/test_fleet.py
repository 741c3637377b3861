"""A fleet of real OS processes sharing one lock store: every instance fires every tick, exactly one runs it.

Each instance is tests/support/fleet_instance.py in its own process, writing its own JSON-lines ledger; the tests
read the ledgers (never a bare sleep: they poll them with a deadline) and judge the fleet from them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests import support
from tests.support import next_whole_second_after, wait_until, whole_seconds

pytestmark = pytest.mark.fleet

ROOT = Path(__file__).resolve().parent.parent
INSTANCE_SCRIPT = ROOT / "tests" / "support" / "fleet_instance.py"
SKIPS = {"skipped_already_ran", "skipped_busy"}
T = TypeVar("T")


# -- helpers -----------------------------------------------------------------------------------------


def now() -> datetime:
    return datetime.now(UTC)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The ledger's complete lines, with their times as datetimes."""
    entries = support.read_ledger(path)
    for entry in entries:
        for key in ("at", "fire_time", "started_at", "finished_at"):
            if entry.get(key):
                entry[key] = datetime.fromisoformat(entry[key])
    return entries


class Instance(support.LedgerProcess):
    def entries(self, event: str | None = None) -> list[dict[str, Any]]:
        return [e for e in read_ledger(self.ledger) if event is None or e["event"] == event]

    def records(self) -> list[dict[str, Any]]:
        return self.entries("record")


def start_instance(directory: Path, store_url: str, name: str, *options: str) -> Instance:
    """Start tests/support/fleet_instance.py as a separate process with the repository root on PYTHONPATH."""
    ledger, log = directory / f"{name}.jsonl", directory / f"{name}.log"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    command = [sys.executable, str(INSTANCE_SCRIPT), "--store", store_url, "--instance", name,
               "--ledger", str(ledger), *options]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT)
    return Instance(name, process, ledger, log)


class Fleet:
    """The processes of one test; whatever happens, teardown terminates every one of them."""

    def __init__(self, directory: Path, store_url: str) -> None:
        self.directory, self.store_url = directory, store_url
        self.instances: list[Instance] = []

    def start(self, name: str, *options: str) -> Instance:
        instance = start_instance(self.directory, self.store_url, name, *options)
        self.instances.append(instance)
        return instance

    def wait_ready(self, timeout: float = 30.0) -> datetime:
        """Wait until every instance has started its scheduler; return when the last one did (30 s by default: an
        instance imports and starts in seconds when CI runs four fleet tests on two cores)."""

        def ready() -> list[datetime] | None:
            for instance in self.instances:
                assert instance.process.poll() is None, (
                    f"{instance.name} exited with {instance.process.returncode}:\n{instance.log_tail()}")
            times = [instance.entries("ready") for instance in self.instances]
            return [t[0]["at"] for t in times] if all(times) else None

        return max(wait_until(ready, timeout, "every instance to be ready"))

    def assert_all_alive(self) -> None:
        for instance in self.instances:
            assert instance.process.poll() is None, f"{instance.name} died:\n{instance.log_tail()}"

    def stop(self, instances: list[Instance] | None = None, timeout: float = 10.0) -> None:
        """SIGTERM, then check each one shut down cleanly (exit 0 and a "stopped" line)."""
        stopping = [i for i in (instances or self.instances) if i.process.poll() is None]
        for instance in stopping:
            instance.process.send_signal(signal.SIGTERM)
        for instance in stopping:
            assert instance.process.wait(timeout) == 0, f"{instance.name} failed to stop:\n{instance.log_tail()}"
            assert instance.entries("stopped"), f"{instance.name} wrote no 'stopped' line"

    def terminate_all(self) -> None:
        for instance in self.instances:
            if instance.process.poll() is None:
                instance.process.send_signal(signal.SIGTERM)
        for instance in self.instances:
            try:
                instance.process.wait(8)
            except subprocess.TimeoutExpired:
                instance.process.kill()
                instance.process.wait()

    def records(self) -> list[dict[str, Any]]:
        return [record for instance in self.instances for record in instance.records()]

    def bodies(self) -> list[dict[str, Any]]:
        return [body for instance in self.instances for body in instance.entries("body")]

    def report(self) -> str:
        return "\n".join(f"--- {i.name} (exit {i.process.poll()}):\n{i.log_tail()}" for i in self.instances)


@pytest.fixture(params=["redis", "mongo"])
def store_url(request: pytest.FixtureRequest) -> str:
    """The same tests against each real store (the fixtures give every test its own prefix or database)."""
    return request.getfixturevalue(f"{request.param}_url")


@pytest.fixture
def fleet(tmp_path: Path, store_url: str) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, store_url)
    try:
        yield fleet
    finally:
        fleet.terminate_all()
        print(fleet.report())  # shown by pytest only if the test failed


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

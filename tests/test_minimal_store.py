"""A third party's store of the lock contract alone (docs/examples/minimal_store.py, shown in docs/stores.md):
it passes the lock contract, runs a fleet of OS processes each tick once, and every control-plane call on it
says clearly that it has none."""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from docs.examples.minimal_store import SQLiteLockStore
from mutexcron import ControlNotSupported, JobContext, Registry, Scheduler, mutex_cron
from mutexcron.cli import main as cli_main
from mutexcron.ops import control
from mutexcron.ops.checkup import check_health
from mutexcron.ops.listing import read_listing
from mutexcron.plugins import register, schemes
from mutexcron.stores import ControlStore, require_control, store_from_url, supports_control
from tests.contract import LockContract, SchedulerContract
from tests.support import next_whole_second_after, wait_until, whole_seconds
from tests.test_fleet import SKIPS, Fleet, assert_no_fire_ran_twice

STORE_CLASS = "docs.examples.minimal_store.SQLiteLockStore"


class TestMinimalSQLiteStore(LockContract, SchedulerContract):
    @pytest.fixture(autouse=True)
    def _store(self, tmp_path: Path) -> None:
        self.store = SQLiteLockStore(str(tmp_path / "locks.db"))


@pytest.fixture
def store(tmp_path: Path) -> SQLiteLockStore:
    return SQLiteLockStore(str(tmp_path / "locks.db"))


@pytest.fixture
def registry() -> Registry:
    registry = Registry()

    @mutex_cron("* * * * *", name="minimal.job", registry=registry)
    def job() -> None:
        """Never fired: these tests call the control plane only."""

    return registry


def test_a_store_of_the_lock_methods_alone_has_no_control_plane(store: SQLiteLockStore) -> None:
    assert not supports_control(store) and not isinstance(store, ControlStore)
    with pytest.raises(ControlNotSupported, match=r"SQLiteLockStore.*cannot list its locks"):
        require_control(store, "list its locks")


def test_every_store_of_mutexcron_has_the_control_plane(redis_url: str, mongo_url: str) -> None:
    for url in ("memory://", redis_url, mongo_url):
        with store_from_url(url) as full:
            assert supports_control(full), full


@pytest.mark.parametrize("call, operation", [
    (lambda s: s.pause("minimal.job"), "pause job 'minimal.job'"),
    (lambda s: s.resume("minimal.job"), "resume job 'minimal.job'"),
    (lambda s: s.set_schedule("minimal.job", "*/5 * * * *"), "set the schedule of job 'minimal.job'"),
    (lambda s: s.reset_schedule("minimal.job"), "reset the schedule of job 'minimal.job'"),
], ids=["pause", "resume", "set_schedule", "reset_schedule"])
def test_scheduler_control_calls_name_the_store_and_the_operation(
        store: SQLiteLockStore, registry: Registry, call: Callable[[Scheduler], object], operation: str) -> None:
    scheduler = Scheduler(store, registry=registry)
    with pytest.raises(ControlNotSupported) as raised:
        call(scheduler)
    assert "SQLiteLockStore" in str(raised.value) and operation in str(raised.value)
    assert raised.value.store is store and raised.value.operation == operation


def test_listing_and_health_need_the_control_plane(store: SQLiteLockStore, registry: Registry) -> None:
    with pytest.raises(ControlNotSupported, match="cannot list its locks"):
        read_listing(store, registry, UTC, datetime.now(UTC))
    with pytest.raises(ControlNotSupported, match="cannot judge the jobs' health"):
        check_health(store, registry)
    with pytest.raises(ControlNotSupported, match=r"cannot pause job 'minimal\.job'"):
        control.pause(store, registry, "minimal.job")


@pytest.fixture
def minimal_scheme() -> Iterator[str]:
    """A URL scheme for the minimal store, registered for this test only."""
    register("lock_store", "minimalsqlite", STORE_CLASS)
    yield "minimalsqlite"
    del schemes("lock_store")["minimalsqlite"]


def test_the_command_line_refuses_control_with_exit_1_naming_the_store(tmp_path: Path, minimal_scheme: str) -> None:
    url = f"{minimal_scheme}://{tmp_path / 'locks.db'}"
    for argv in (["pause", "any.job"], ["list"]):
        err = _Out()
        assert cli_main([*argv, "--store", url], stdout=_Out(), stderr=err) == 1
        assert "has no control plane" in err.text and "SQLiteLockStore" in err.text, err.text


class _Out:
    def __init__(self) -> None:
        self.text = ""

    def write(self, text: str) -> int:
        self.text += text
        return len(text)


def test_a_scheduler_on_it_runs_each_tick_once_without_control(store: SQLiteLockStore,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    """No pause, override, catch-up or alert reads: nothing logged above INFO, and the one INFO line about it."""
    registry, ran = Registry(), Counter[datetime]()
    done = threading.Event()

    @mutex_cron("* * * * * *", name="minimal.tick", catch_up="all", alert_after=timedelta(seconds=1),
                registry=registry)
    def tick(ctx: JobContext) -> None:
        ran[ctx.fire_time] += 1
        if len(ran) >= 3:
            done.set()

    caplog.set_level(logging.INFO, logger="mutexcron")
    twin = Scheduler(store, registry=registry, instance_id="twin", sync_interval=timedelta(milliseconds=100))
    with Scheduler(store, registry=registry, instance_id="one", sync_interval=timedelta(milliseconds=100)), twin:
        assert done.wait(10)
    assert set(ran.values()) == {1}
    noisy = [r.getMessage() for r in caplog.records if r.levelno > logging.INFO]
    assert noisy == []
    told = [r for r in caplog.records if "has no control plane" in r.getMessage()]
    assert len(told) == 2 and all(r.levelno == logging.INFO for r in told)  # once per scheduler started


@pytest.fixture
def sqlite_fleet(tmp_path: Path) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, f"sqlite://{tmp_path / 'locks.db'}")
    try:
        yield fleet
    finally:
        fleet.terminate_all()
        print(fleet.report())  # shown by pytest only if the test failed


@pytest.mark.fleet
def test_a_fleet_of_three_processes_on_it_runs_every_tick_exactly_once(sqlite_fleet: Fleet) -> None:
    fleet = sqlite_fleet
    instances = [fleet.start(f"instance-{n}", "--scheme", f"sqlite={STORE_CLASS}") for n in range(3)]
    first_tick = next_whole_second_after(fleet.wait_ready())

    def ticks_run() -> int:
        return len({r["fire_time"] for r in fleet.records() if r["outcome"] == "succeeded"
                    and r["fire_time"] >= first_tick})

    wait_until(lambda: ticks_run() >= 8, timeout=20, what="8 ticks run after every instance was ready")
    fleet.assert_all_alive()
    stopped_waiting = datetime.now(UTC)
    fleet.stop()

    window = whole_seconds(first_tick, (stopped_waiting - timedelta(seconds=0.5)).replace(microsecond=0))
    assert len(window) >= 7
    records: list[dict[str, Any]] = fleet.records()
    for tick in window:
        of_tick = [r for r in records if r["fire_time"] == tick]
        assert len([r for r in of_tick if r["outcome"] == "succeeded"]) == 1, f"tick {tick}: {of_tick}"
        assert Counter(r["instance"] for r in of_tick) == {i.name: 1 for i in instances}
        assert {r["outcome"] for r in of_tick if r["outcome"] != "succeeded"} <= SKIPS
    assert_no_fire_ran_twice(fleet)
    for instance in instances:
        assert " ERROR " not in instance.log.read_text(), instance.tail()

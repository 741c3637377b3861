"""ping_url: a healthchecks.io/Cronitor-style dead man's switch, against real local HTTP servers
(tests/support/ping_servers.py). Redirects are in tests/ops/test_ping_redirects.py."""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Outcome, Registry, RunRecord, Scheduler, SchedulerConfigError, mutex_cron
from mutexcron.ping_urls import ping_target
from mutexcron.running.pings import Pings
from mutexcron.stores import MemoryLockStore
from tests.support import wait_until
from tests.support.ping_servers import PingServer, TricklingServer
from tests.support.servers import free_port

TOKEN = "3f1c"  # the secret part of every test server's ping URL (…/ping/3f1c)


@pytest.fixture
def server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


@pytest.fixture
def other_server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


@pytest.fixture
def trickling() -> Iterator[TricklingServer]:
    trickling_server = TricklingServer()
    yield trickling_server
    trickling_server.close()


@pytest.fixture
def scheduler(registry: Registry) -> Iterator[Scheduler]:
    made = Scheduler(MemoryLockStore(), registry=registry, instance_id="A")
    yield made
    made.shutdown(timeout=timedelta(seconds=2))


@pytest.fixture
def pings() -> Iterator[Pings]:
    sender = Pings(timeout=5.0)
    yield sender
    sender.stop(time.monotonic() + 2)


def failing_body() -> None:
    raise RuntimeError("boom")


def succeeded(pings: Pings, url: str) -> None:
    """Queue the ping of a run of ``url``'s job that succeeded, as the scheduler does after a run."""
    now = datetime.now(UTC)
    pings.send(url, RunRecord("job", now, "A", Outcome.SUCCEEDED, now, now))


def ping_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("mutexcron-ping")]


def warnings_of(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "mutexcron.pings" and r.levelno == logging.WARNING]


# -- what is sent ------------------------------------------------------------------------------------------


def test_a_succeeded_run_gets_the_ping_url(server: PingServer, registry: Registry, scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler.run_now("job")
    wait_until(lambda: len(server.paths) == 2, timeout=5, what="the start and the success pings")
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c"]


def test_a_failed_run_gets_the_ping_url_with_fail(server: PingServer, registry: Registry,
                                                 scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url + "/")(failing_body)
    scheduler.run_now("job")
    wait_until(lambda: len(server.paths) == 2, timeout=5, what="the start and the failure pings")
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c/fail"]


@pytest.mark.parametrize(("body", "path", "sent"), [
    (failing_body, "?rid=7&next=/x/", "/ping/3f1c/fail?rid=7&next=/x/"),
    (lambda: None, "/?rid=7&next=/x/", "/ping/3f1c?rid=7&next=/x/"),
], ids=["failed", "succeeded"])
def test_the_query_of_the_ping_url_is_kept_as_written_after_the_suffix(
        server: PingServer, registry: Registry, scheduler: Scheduler, body: Callable[[], None], path: str,
        sent: str) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url + path)(body)
    scheduler.run_now("job")
    wait_until(lambda: len(server.paths) == 2, timeout=5, what="the start and the end pings")
    assert server.paths == ["/ping/3f1c/start?rid=7&next=/x/", sent]


@pytest.mark.parametrize(("url", "kind", "target"), [
    ("https://hc-ping.com/8d3c?rid=1", "fail", "https://hc-ping.com/8d3c/fail?rid=1"),
    ("https://hc-ping.com/8d3c?rid=1", "start", "https://hc-ping.com/8d3c/start?rid=1"),
    ("https://hc-ping.com/8d3c/", "start", "https://hc-ping.com/8d3c/start"),
    ("https://cronitor.link/p/key/job?env=prod#top", "success", "https://cronitor.link/p/key/job?env=prod"),
    ("http://h:8000", "fail", "http://h:8000/fail"),
])
def test_the_suffix_of_a_ping_goes_after_the_path_and_before_the_query(url: str, kind: str, target: str) -> None:
    assert ping_target(url, kind) == target  # type: ignore[arg-type]


def test_a_skipped_fire_sends_no_ping(server: PingServer, registry: Registry, scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler.store.acquire("job", owner="other", lease=timedelta(minutes=1), fire_time=None)
    scheduler.run_now("job")  # busy: skipped
    scheduler.store.force_unlock("job")
    scheduler.run_now("job")  # this one runs
    wait_until(lambda: len(server.paths) == 2, timeout=5, what="the run's pings")
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c"]


def test_the_start_ping_is_sent_while_the_body_runs(server: PingServer, registry: Registry,
                                                    scheduler: Scheduler) -> None:
    started = threading.Event()

    def body() -> None:
        wait_until(lambda: server.paths, timeout=5, what="the start ping, sent before the body ends")
        started.set()

    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(body)
    scheduler.run_now("job")
    assert started.is_set()
    wait_until(lambda: len(server.paths) == 2, timeout=5, what="the success ping")
    assert server.paths == ["/ping/3f1c/start", "/ping/3f1c"]


def test_a_fire_skipped_as_late_sends_no_start_ping(server: PingServer, registry: Registry) -> None:
    ran = threading.Event()
    mutex_cron("* * * * * *", name="late", registry=registry, ping_url=server.url,
               start_deadline=timedelta(microseconds=1))(ran.set)
    mutex_cron("* * * * * *", name="control", registry=registry, ping_url=server.url + "/control")(lambda: None)
    made = Scheduler(MemoryLockStore(), registry=registry, instance_id="A")
    made.start()
    try:
        wait_until(lambda: len([p for p in server.paths if p.startswith("/ping/3f1c/control")]) >= 4, timeout=10,
                   what="two runs of the control job")
    finally:
        made.shutdown(timeout=timedelta(seconds=2))
    assert not ran.is_set()
    assert [p for p in server.paths if not p.startswith("/ping/3f1c/control")] == []


# -- failures, logged masked ---------------------------------------------------------------------------------


def test_a_failing_ping_is_logged_once_per_outage_without_its_path(server: PingServer, registry: Registry,
                                                                   scheduler: Scheduler,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url + "?rid=s3cret")(lambda: None)
    server.status = 500
    with caplog.at_level(logging.DEBUG, logger="mutexcron.pings"):
        for count in (1, 2, 3):
            scheduler.run_now("job")
            wait_until(lambda count=count: len(server.paths) == 2 * count, timeout=5,  # type: ignore[misc]
                       what=f"the start and end pings of run {count}")
        server.status = 200
        scheduler.run_now("job")
        wait_until(lambda: any("work again" in r.getMessage() for r in caplog.records), timeout=5,
                   what="the ping's recovery line")
    failures = warnings_of(caplog)
    assert len(failures) == 1 and "HTTP 500" in failures[0] and f"{server.origin}/***" in failures[0]
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert TOKEN not in logged and "s3cret" not in logged


def test_a_dead_host_is_a_failed_ping_logged_masked(pings: Pings, caplog: pytest.LogCaptureFixture) -> None:
    dead = f"http://127.0.0.1:{free_port()}/ping/{TOKEN}"  # nothing listens there
    with caplog.at_level(logging.WARNING, logger="mutexcron.pings"):
        succeeded(pings, dead)
        failure = wait_until(lambda: warnings_of(caplog), timeout=5, what="the failure's warning")[0]
    assert "Connection refused" in failure and TOKEN not in failure


# -- bounds: a deadline per ping, a queue per host, hosts side by side ---------------------------------------


def test_a_server_that_trickles_its_headers_holds_a_ping_no_longer_than_its_deadline(
        trickling: TricklingServer, caplog: pytest.LogCaptureFixture) -> None:
    # The server would go on for 15 s, writing a byte every 0.1 s: each socket operation is short.
    pings = Pings(timeout=1.0)
    with caplog.at_level(logging.WARNING, logger="mutexcron.pings"):
        succeeded(pings, trickling.url)
        assert trickling.gone.wait(5), "the ping was not given up at its deadline"
        failure = wait_until(lambda: warnings_of(caplog), timeout=2, what="the failure's warning")[0]
    assert trickling.held[0] < 2.5  # the deadline (1 s), plus the server noticing the closed socket
    assert "deadline (1s)" in failure and TOKEN not in failure
    assert pings.stop(time.monotonic() + 2)


def test_scheduler_ping_timeout_is_each_pings_deadline(trickling: TricklingServer, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=trickling.url)(lambda: None)
    scheduler = Scheduler(MemoryLockStore(), registry=registry, ping_timeout=timedelta(seconds=1))
    try:
        scheduler.run_now("job")
        assert trickling.gone.wait(5), "the ping outlived Scheduler(ping_timeout=1s)"
    finally:
        scheduler.shutdown(timeout=timedelta(seconds=2))
    assert trickling.held[0] < 2.5


@pytest.mark.parametrize("value", [0, -1, timedelta(0), "10", math.nan, math.inf, True, None])
def test_a_bad_ping_timeout_is_a_scheduler_config_error_naming_it(value: object) -> None:
    with pytest.raises(SchedulerConfigError, match="Scheduler ping_timeout"):
        Scheduler(MemoryLockStore(), ping_timeout=value)  # type: ignore[arg-type]


@pytest.mark.parametrize(("value", "seconds"), [(2.5, 2.5), (timedelta(seconds=3), 3.0)])
def test_ping_timeout_takes_seconds_or_a_timedelta_and_defaults_to_10s(value: object, seconds: float) -> None:
    assert Scheduler(MemoryLockStore()).ping_timeout == timedelta(seconds=10)
    assert Scheduler(MemoryLockStore(), ping_timeout=value).ping_timeout == timedelta(seconds=seconds)  # type: ignore[arg-type]


def test_a_slow_host_never_delays_the_pings_of_another(server: PingServer, other_server: PingServer,
                                                      pings: Pings) -> None:
    server.hold.clear()
    succeeded(pings, server.url)
    wait_until(lambda: server.paths, timeout=5, what="the slow host's ping to arrive")
    succeeded(pings, other_server.url)
    wait_until(lambda: other_server.paths, timeout=3, what="the other host's ping, while the slow one holds")


def test_a_full_queue_drops_the_oldest_pings_with_one_warning(server: PingServer,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    dropped: list[str] = []
    pings = Pings(timeout=5.0, max_queued=3, dropped=dropped.append)
    server.hold.clear()
    with caplog.at_level(logging.INFO, logger="mutexcron.pings"):
        succeeded(pings, server.url + "?n=1")
        wait_until(lambda: server.paths, timeout=5, what="the first ping, held by the server")
        for n in range(2, 7):  # 2, 3, 4 wait; 5 and 6 push out 2 and 3
            succeeded(pings, server.url + f"?n={n}")
        assert dropped == [server.origin, server.origin]
        server.hold.set()
        wait_until(lambda: len(server.paths) == 4, timeout=5, what="the queued pings")
        wait_until(lambda: any("drained" in r.getMessage() for r in caplog.records), timeout=5, what="the end")
    assert server.paths == [f"/ping/3f1c?n={n}" for n in (1, 4, 5, 6)]
    assert len(warnings_of(caplog)) == 1 and "dropping the oldest" in warnings_of(caplog)[0]
    assert pings.stop(time.monotonic() + 2)


# -- threads --------------------------------------------------------------------------------------------------


def test_a_slow_ping_server_never_delays_the_release(server: PingServer, registry: Registry,
                                                    scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    server.hold.clear()
    record = scheduler.run_now("job")  # returns while the ping server still holds its answer
    lock = scheduler.store.lock("job")
    assert record.outcome is not None and record.outcome.ran
    assert lock is not None and not lock.locked
    wait_until(lambda: server.paths, timeout=5, what="the ping to arrive")
    server.hold.set()


def test_the_ping_threads_end_once_their_pings_are_sent(server: PingServer, pings: Pings) -> None:
    succeeded(pings, server.url)
    wait_until(lambda: server.paths, timeout=5, what="a ping")
    wait_until(lambda: not ping_threads(), timeout=5, what="the ping threads to end")


def test_shutdown_ends_the_ping_threads_even_while_a_ping_hangs(server: PingServer, registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler = Scheduler(MemoryLockStore(), registry=registry, instance_id="B")
    server.hold.clear()  # the server answers in 10 s, after the shutdown grace
    scheduler.run_now("job")
    wait_until(lambda: server.paths, timeout=5, what="a ping")
    assert "mutexcron-ping" in ping_threads()
    scheduler.shutdown(timeout=timedelta(seconds=1))
    wait_until(lambda: not ping_threads(), timeout=3, what="the ping threads to end")

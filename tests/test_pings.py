"""ping_url (issue 10): a healthchecks.io/Cronitor-style dead man's switch, against a real local HTTP server."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mutexcron import Registry, Scheduler, mutex_cron
from mutexcron.stores import MemoryLockStore
from tests.support import wait_until


class PingServer:
    """A local HTTP server that records the paths it was asked for; ``status`` and ``hold`` shape its answers."""

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.status = 200
        self.hold = threading.Event()  # while clear, answers wait for it (a slow ping server)
        self.hold.set()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                server.paths.append(self.path)
                server.hold.wait(10)
                self.send_response(server.status)
                self.end_headers()
                self.wfile.write(b"OK")

            def log_message(self, format: str, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/ping/3f1c"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


@pytest.fixture
def scheduler(registry: Registry) -> Iterator[Scheduler]:
    made = Scheduler(MemoryLockStore(), registry=registry, instance_id="A")
    yield made
    made.shutdown(timeout=timedelta(seconds=2))


def test_a_succeeded_run_gets_the_ping_url(server: PingServer, registry: Registry, scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler.run_now("job")
    wait_until(lambda: server.paths, timeout=5, what="a ping")
    assert server.paths == ["/ping/3f1c"]


def test_a_failed_run_gets_the_ping_url_with_fail(server: PingServer, registry: Registry,
                                                 scheduler: Scheduler) -> None:
    def body() -> None:
        raise RuntimeError("boom")

    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url + "/")(body)
    scheduler.run_now("job")
    wait_until(lambda: server.paths, timeout=5, what="a ping")
    assert server.paths == ["/ping/3f1c/fail"]


def test_a_skipped_fire_sends_no_ping(server: PingServer, registry: Registry, scheduler: Scheduler) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler.store.acquire("job", owner="other", lease=timedelta(minutes=1), fire_time=None)
    scheduler.run_now("job")  # busy: skipped
    scheduler.store.force_unlock("job")
    scheduler.run_now("job")  # this one runs
    wait_until(lambda: server.paths, timeout=5, what="the run's ping")
    assert server.paths == ["/ping/3f1c"]


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


def test_a_failing_ping_is_logged_once_per_outage(server: PingServer, registry: Registry, scheduler: Scheduler,
                                                  caplog: pytest.LogCaptureFixture) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    server.status = 500
    with caplog.at_level(logging.INFO, logger="mutexcron.pings"):
        for count in (1, 2, 3):
            scheduler.run_now("job")
            wait_until(lambda count=count: len(server.paths) == count, timeout=5, what=f"ping {count}")  # type: ignore[misc]
        server.status = 200
        scheduler.run_now("job")
        wait_until(lambda: any("work again" in r.getMessage() for r in caplog.records), timeout=5,
                   what="the ping's recovery line")
    failures = [r for r in caplog.records if r.levelno == logging.WARNING and "failed" in r.getMessage()]
    assert len(failures) == 1 and "500" in failures[0].getMessage()


def test_pings_go_out_from_a_background_thread_that_ends_with_shutdown(server: PingServer,
                                                                       registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=server.url)(lambda: None)
    scheduler = Scheduler(MemoryLockStore(), registry=registry, instance_id="B")
    scheduler.run_now("job")
    wait_until(lambda: server.paths, timeout=5, what="a ping")
    assert any(t.name == "mutexcron-ping" for t in threading.enumerate())
    scheduler.shutdown(timeout=timedelta(seconds=2))
    wait_until(lambda: not any(t.name == "mutexcron-ping" for t in threading.enumerate()), timeout=3,
               what="the ping thread to end")

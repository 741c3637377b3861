"""The lock store goes away and comes back: the scheduler fails closed, says so once, and recovers.

A real Redis or MongoDB is reached through tests/support/tcp_proxy.py, whose cut() drops the link as a network
outage would (open connections reset, new ones refused) and whose restore() brings it back.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import pytest

from mutexcron.records import JobContext, Outcome, RunRecord
from mutexcron.registry import Registry, mutex_cron
from mutexcron.scheduling.scheduler import Scheduler
from tests.support import wait_until
from tests.support.tcp_proxy import TcpProxy

LOGGER = "mutexcron.scheduler"
MONGO_TIMEOUTS = {"serverSelectionTimeoutMS": "500", "connectTimeoutMS": "500", "socketTimeoutMS": "1000"}
T = TypeVar("T")


def _through(url: str, proxy: TcpProxy, *, path: str, query: dict[str, str]) -> str:
    """``url`` pointed at the proxy (credentials kept), with ``path`` and extra ``query`` options."""
    parts = urlsplit(url)
    credentials = parts.netloc.rpartition("@")[0]
    netloc = f"{credentials}@{proxy.host}:{proxy.port}" if credentials else f"{proxy.host}:{proxy.port}"
    options = dict(parse_qsl(parts.query, keep_blank_values=True)) | query
    return urlunsplit(parts._replace(netloc=netloc, path=path, query=urlencode(options)))


def _proxy_to(url: str) -> TcpProxy:
    parts = urlsplit(url)
    assert parts.hostname and parts.port, f"the test server URL {url!r} must name a host and a port"
    return TcpProxy(parts.hostname, parts.port)


@pytest.fixture(params=["redis", "mongo"])
def proxied_store(request: pytest.FixtureRequest) -> Iterator[tuple[str, TcpProxy]]:
    """A store URL of this test's own that reaches the real store through a proxy the test can cut."""
    if request.param == "redis":
        server, prefix = request.getfixturevalue("redis_server_url"), request.getfixturevalue("redis_prefix")
        proxy = _proxy_to(server)
        url = _through(server, proxy, path=urlsplit(server).path, query={"prefix": prefix})
    else:
        server, database = request.getfixturevalue("mongo_server_url"), request.getfixturevalue("mongo_database")
        proxy = _proxy_to(server)
        url = _through(server, proxy, path=f"/{database}", query=MONGO_TIMEOUTS)
    try:
        yield url, proxy
    finally:
        proxy.close()


@dataclass
class ProxiedJob:
    """An every-second job on an in-process Scheduler whose store link can be cut and restored."""

    scheduler: Scheduler
    proxy: TcpProxy
    caplog: pytest.LogCaptureFixture
    records: list[RunRecord] = field(default_factory=list)
    bodies: list[datetime] = field(default_factory=list)
    succeeded: threading.Event = field(default_factory=threading.Event)

    def on_record(self, record: RunRecord) -> None:
        self.records.append(record)
        if record.outcome is Outcome.SUCCEEDED:
            self.succeeded.set()

    def cut_right_after_a_run(self) -> datetime:
        """Cut the link just after a run finished (never during one), and return when."""
        self.succeeded.clear()
        assert self.succeeded.wait(5), "the job did not run before the cut"
        self.proxy.cut()
        return datetime.now(UTC)

    def restore(self) -> datetime:
        self.proxy.restore()
        return datetime.now(UTC)

    def fired_after(self, moment: datetime) -> list[RunRecord]:
        return [r for r in list(self.records) if r.fire_time > moment]

    def wait_for_skips(self, count: int, after: datetime) -> list[RunRecord]:
        return wait_until(
            lambda: len(skips := [r for r in self.fired_after(after) if r.outcome is Outcome.SKIPPED_STORE_ERROR])
            >= count and skips,
            timeout=count * 1.5 + 5, what=f"{count} fires skipped for the store error",
        )

    def logs(self, level: int, since: datetime) -> list[logging.LogRecord]:
        return [r for r in self.caplog.records
                if r.name == LOGGER and r.levelno == level and r.created >= since.timestamp()]

    def assert_scheduler_alive(self) -> None:
        assert self.scheduler.running
        assert any(t.name == "APScheduler" and t.is_alive() for t in threading.enumerate()), (
            "APScheduler's thread is gone")


@pytest.fixture
def job(proxied_store: tuple[str, TcpProxy], registry: Registry, caplog: pytest.LogCaptureFixture,
        ) -> Iterator[ProxiedJob]:
    """The job, already run once through the (healthy) proxy."""
    url, proxy = proxied_store
    caplog.set_level(logging.INFO, logger=LOGGER)
    scheduler = Scheduler(url, registry=registry, instance_id="outage-test")
    harness = ProxiedJob(scheduler, proxy, caplog)

    @mutex_cron("* * * * * *", name="outage.tick", registry=registry)
    def tick(ctx: JobContext) -> None:
        harness.bodies.append(ctx.fire_time)

    scheduler.add_listener(harness.on_record)
    scheduler.start()
    try:
        assert harness.succeeded.wait(10), f"the job never ran through the proxy: {harness.records}"
        yield harness
    finally:
        scheduler.shutdown(timeout=timedelta(seconds=5))


def test_fires_during_an_outage_are_skipped_and_the_body_does_not_run(job: ProxiedJob) -> None:
    cut_at = job.cut_right_after_a_run()
    job.wait_for_skips(3, after=cut_at)

    assert {r.outcome for r in job.fired_after(cut_at)} == {Outcome.SKIPPED_STORE_ERROR}
    assert [t for t in job.bodies if t > cut_at] == []
    job.assert_scheduler_alive()


def test_an_outage_logs_one_error_however_many_fires_it_skips(job: ProxiedJob) -> None:
    cut_at = job.cut_right_after_a_run()
    skips = job.wait_for_skips(4, after=cut_at)

    errors = job.logs(logging.ERROR, since=cut_at)
    assert len(errors) == 1, f"{len(errors)} errors for {len(skips)} skipped fires: {[e.getMessage() for e in errors]}"
    assert "unreachable" in errors[0].getMessage()


def test_the_job_runs_again_once_the_store_is_back_and_a_warning_says_so(job: ProxiedJob) -> None:
    cut_at = job.cut_right_after_a_run()
    skips = job.wait_for_skips(2, after=cut_at)
    restored_at = job.restore()

    ran_again = wait_until(lambda: [r for r in job.fired_after(restored_at) if r.outcome is Outcome.SUCCEEDED],
                           timeout=5, what="a run after the store came back")
    print(f"{len(skips)}+ fires skipped during the outage; ran again {ran_again[0].fire_time - restored_at} "
          "after the restore")
    assert [t for t in job.bodies if t > restored_at]
    warnings = [w.getMessage() for w in job.logs(logging.WARNING, since=cut_at)]
    assert any("reachable again" in w for w in warnings), warnings
    assert len(job.logs(logging.ERROR, since=cut_at)) == 1  # still one for the whole outage
    job.assert_scheduler_alive()

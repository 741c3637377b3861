"""Redirects of a ping: at most 3, to the same host, and to the same scheme and port or from http up to https.
Anything else is a failed ping, logged masked. Real local HTTP and HTTPS servers (tests/support/ping_servers.py);
``127.0.0.1`` and ``localhost`` are two hosts to a ping, as they are to a browser."""

from __future__ import annotations

import logging
import ssl
import time
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from mutexcron import Outcome, RunRecord
from mutexcron.running.pings import Pings
from tests.support import wait_until
from tests.support.ping_servers import PingServer, client_tls, server_tls, serving, tls_files  # noqa: F401 (fixtures)


@pytest.fixture
def pings() -> Iterator[Pings]:
    sender = Pings(timeout=5.0)
    yield sender
    sender.stop(time.monotonic() + 2)


@pytest.fixture
def tls_pings(client_tls: ssl.SSLContext) -> Iterator[Pings]:  # noqa: F811
    """Pings that trust the test certificate."""
    sender = Pings(timeout=5.0, context=client_tls)
    yield sender
    sender.stop(time.monotonic() + 2)


@pytest.fixture
def server() -> Iterator[PingServer]:
    ping_server = PingServer()
    yield ping_server
    ping_server.close()


def succeeded(pings: Pings, url: str) -> None:
    now = datetime.now(UTC)
    pings.send(url, RunRecord("job", now, "A", Outcome.SUCCEEDED, now, now))


def failure_of(pings: Pings, url: str, caplog: pytest.LogCaptureFixture) -> str:
    """Send a ping to ``url`` and return the warning of its failure."""
    with caplog.at_level(logging.WARNING, logger="mutexcron.pings"):
        succeeded(pings, url)
        return wait_until(lambda: [r.getMessage() for r in caplog.records if r.name == "mutexcron.pings"],
                          timeout=5, what="the ping's failure")[0]


def test_a_redirect_on_the_same_host_and_scheme_is_followed(server: PingServer, pings: Pings,
                                                           caplog: pytest.LogCaptureFixture) -> None:
    server.redirects["/ping/3f1c"] = "/v2/ping/3f1c"
    with caplog.at_level(logging.WARNING, logger="mutexcron.pings"):
        succeeded(pings, server.url)
        wait_until(lambda: len(server.paths) == 2, timeout=5, what="the redirected ping")
    assert server.paths == ["/ping/3f1c", "/v2/ping/3f1c"]
    assert pings.stop(time.monotonic() + 2) and not caplog.records


def test_three_redirects_are_followed(server: PingServer, pings: Pings) -> None:
    server.redirects.update({"/ping/3f1c": "/1", "/1": "/2", "/2": f"{server.origin}/3"})
    succeeded(pings, server.url)
    wait_until(lambda: server.paths == ["/ping/3f1c", "/1", "/2", "/3"], timeout=5, what="three redirects")


def test_a_fourth_redirect_is_a_failed_ping(server: PingServer, pings: Pings,
                                            caplog: pytest.LogCaptureFixture) -> None:
    server.redirects.update({"/ping/3f1c": "/1", "/1": "/2", "/2": "/3", "/3": "/4"})
    failure = failure_of(pings, server.url, caplog)
    assert "more than 3 redirects" in failure
    assert server.paths == ["/ping/3f1c", "/1", "/2", "/3"]


def test_a_redirect_to_another_host_is_a_failed_ping_logged_masked(server: PingServer, pings: Pings,
                                                                   caplog: pytest.LogCaptureFixture) -> None:
    elsewhere = PingServer(host="localhost")
    with serving(elsewhere):
        server.redirects["/ping/3f1c"] = f"{elsewhere.origin}/moved/3f1c"
        failure = failure_of(pings, server.url, caplog)
        assert elsewhere.paths == []
    assert "another host" in failure and f"{elsewhere.origin}/***" in failure and "3f1c" not in failure


def test_a_redirect_to_another_port_is_a_failed_ping(server: PingServer, pings: Pings,
                                                     caplog: pytest.LogCaptureFixture) -> None:
    elsewhere = PingServer()
    with serving(elsewhere):
        server.redirects["/ping/3f1c"] = f"{elsewhere.origin}/moved"
        assert "another port" in failure_of(pings, server.url, caplog)
        assert elsewhere.paths == []


def test_a_redirect_from_http_up_to_https_on_the_same_host_is_followed(server: PingServer, tls_pings: Pings,
                                                                      server_tls: ssl.SSLContext) -> None:  # noqa: F811
    secure = PingServer(tls=server_tls)
    with serving(secure):
        server.redirects["/ping/3f1c"] = f"{secure.origin}/ping/3f1c"
        succeeded(tls_pings, server.url)
        wait_until(lambda: secure.paths, timeout=5, what="the ping at the https URL")
        assert secure.paths == ["/ping/3f1c"]


def test_a_redirect_from_https_down_to_http_is_a_failed_ping(server: PingServer, tls_pings: Pings,
                                                            server_tls: ssl.SSLContext,  # noqa: F811
                                                            caplog: pytest.LogCaptureFixture) -> None:
    secure = PingServer(tls=server_tls)
    with serving(secure):
        secure.redirects["/ping/3f1c"] = f"{server.origin}/ping/3f1c"
        failure = failure_of(tls_pings, secure.url, caplog)
        assert secure.paths == ["/ping/3f1c"]  # the https server was asked
    assert "https down to http" in failure and server.paths == []


def test_a_redirect_to_another_scheme_is_a_failed_ping(server: PingServer, pings: Pings,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    server.redirects["/ping/3f1c"] = "ftp://127.0.0.1/3f1c"
    failure = failure_of(pings, server.url, caplog)
    assert "not an http(s) URL" in failure and "3f1c" not in failure

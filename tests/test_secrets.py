"""Passwords in store, task backend and cancel store URLs, and the secret path of ping URLs, never leak: not in
errors, logs or reprs.

Masking is by text (everything between the scheme and the last ``@``), so a password holding ``#``,
``/``, ``?`` or ``@``, or one in a mistyped URL, is hidden as well as any other.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pytest import LogCaptureFixture

from mutexcron import Registry, mutex_cron
from mutexcron.errors import JobDefinitionError, MutexcronError, StoreConfigError
from mutexcron.ping_urls import mask_ping_url
from mutexcron.stores import LockStore, store_from_url
from mutexcron.tasks import TaskQueue
from mutexcron.tasks.records.base import cancel_store_from_url
from mutexcron.tasks.records.redis import RedisTaskRecords
from mutexcron.urls import mask_url, scrub
from tests.support.leaks import SecretURL, assert_hidden, exception_texts, secret_urls, texts_while

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def exercise(build: Callable[[], Any], use: Callable[[Any], object]) -> list[str]:
    """Build the object, use it once (it fails: nothing listens on port 1), and collect every text shown."""
    texts: list[str] = []
    try:
        built = build()
    except MutexcronError as error:
        return exception_texts(error)
    texts.append(repr(built))
    try:
        use(built)
    except MutexcronError as error:
        texts += exception_texts(error)
    finally:
        built.close()
    return texts


def status_of_a_task(queue: TaskQueue) -> object:
    """Ask the queue's backend (and cancel store) about a task: it fails, nothing listens on port 1."""
    return repr(queue.backend), queue.status("x")


@pytest.mark.parametrize("url", [
    "redis://:S3cr#et@127.0.0.1:6379/11",
    "redis://:S3c/ret@127.0.0.1:6379/11",
    "mongodb://user:S3c?ret@127.0.0.1/db",
    "redis:/:S3cret@redis.internal:6379/0",
    "redis://:S3c@ret@127.0.0.1:6379/0",
    "redis://user:pa:ss:S3cret@127.0.0.1:6379/0",
])
def test_mask_url_hides_passwords_that_a_parser_would_cut(url: str) -> None:
    assert "S3c" not in mask_url(url) and "***@" in mask_url(url)


def test_mask_url_masks_everything_between_the_scheme_and_the_last_at() -> None:
    assert mask_url("redis://user:p@ss/w?rd@127.0.0.1:6379/0") == "redis://***@127.0.0.1:6379/0"


def test_mask_url_masks_from_the_start_when_the_scheme_is_mistyped() -> None:
    assert mask_url("redis:/:S3cret@redis.internal:6379/0") == "***@redis.internal:6379/0"


def test_mask_url_masks_secret_query_options() -> None:
    assert mask_url("mongodb://host/db?authSource=admin&password=S3c#ret") == "mongodb://host/db?authSource=admin&password=***"


@pytest.mark.parametrize("option", ["tlsCertificateKeyFilePassword", "ssl_password", "sentinel_password",
                                    "authMechanismProperties", "api_token", "clientSecret"])
def test_mask_url_masks_every_query_option_whose_name_says_it_is_secret(option: str) -> None:
    url = f"mongodb://host/db?authSource=admin&{option}=AWS_SESSION_TOKEN:S3cr3t&w=1"
    assert mask_url(url) == f"mongodb://host/db?authSource=admin&{option}=***&w=1"
    assert "S3cr3t" not in scrub("cannot use AWS_SESSION_TOKEN:S3cr3t", url)


def test_a_store_url_with_a_secret_query_option_is_shown_masked() -> None:
    store = store_from_url("mongodb://127.0.0.1:1/db?tls=true&tlsCertificateKeyFilePassword=S3cr3t"
                           "&serverSelectionTimeoutMS=20")
    try:
        assert "S3cr3t" not in repr(store)
    finally:
        store.close()


def test_mask_url_leaves_a_url_without_secrets_alone() -> None:
    assert mask_url("redis://127.0.0.1:6379/0?prefix=x") == "redis://127.0.0.1:6379/0?prefix=x"


def test_scrub_removes_the_password_as_written_and_as_parsed() -> None:
    url = "redis://:S3%2Fcret@127.0.0.1:6379/0"
    assert scrub("auth S3%2Fcret / S3/cret failed", url) == "auth *** / *** failed"


def test_a_password_with_a_hash_gets_a_store_error_that_says_how_to_encode_it() -> None:
    url = "redis://:S3cr#et@127.0.0.1:6379/11"  # the traceback quotes the line that raised: not this one
    with pytest.raises(StoreConfigError, match="percent-encode") as raised:
        store_from_url(url)
    assert_hidden("S3cr", exception_texts(raised.value))


def test_a_mistyped_scheme_is_not_loaded_as_a_store_class() -> None:
    url = "redis:/:S3cret@redis.internal:6379/0"
    with pytest.raises(StoreConfigError, match="neither a URL") as raised:
        store_from_url(url)
    assert_hidden("S3cret", exception_texts(raised.value))


@FUZZ
@given(secret=secret_urls)
def test_store_from_url_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: exercise(lambda: store_from_url(url), LockStore.ping)))


@FUZZ
@given(secret=secret_urls)
def test_task_queue_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: exercise(lambda: TaskQueue(url), status_of_a_task)))


@FUZZ
@given(secret=secret_urls)
def test_task_queue_with_a_cancel_store_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: [
        *exercise(lambda: TaskQueue(url, cancel_store=url), status_of_a_task),
        *exercise(lambda: TaskQueue("amqp://guest:guest@127.0.0.1:1/", cancel_store=url), status_of_a_task),
    ]))


@FUZZ
@given(secret=secret_urls)
def test_the_cancel_store_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: [
        *exercise(lambda: cancel_store_from_url(url), lambda marks: marks.get("x")),
        *exercise(lambda: RedisTaskRecords.from_url(url), lambda marks: marks.get("x")),
    ]))



# -- ping URLs: healthchecks.io and Cronitor put the secret in the path ------------------------------------------

PING_TOKEN = "8d3c2a1e-5b7f-4c1d-9e2a-c0ffee15dead"


@pytest.mark.parametrize(("url", "masked"), [
    (f"https://hc-ping.com/{PING_TOKEN}", "https://hc-ping.com/***"),
    (f"https://hc-ping.com/{PING_TOKEN}?rid=1", "https://hc-ping.com/***"),
    (f"https://cronitor.link/p/{PING_TOKEN}/nightly", "https://cronitor.link/***"),
    (f"http://user:{PING_TOKEN}@hc.internal:8000/ping/x", "http://hc.internal:8000/***"),
    (f"https://user:S3c/{PING_TOKEN}@hc.internal/ping", "https://***/***"),  # the host cannot be told safely
    (f"hc-ping.com/{PING_TOKEN}", "***"),
    ("https://hc-ping.com/", "https://hc-ping.com"),
])
def test_mask_ping_url_shows_only_the_scheme_host_and_port(url: str, masked: str) -> None:
    assert mask_ping_url(url) == masked


@FUZZ
@given(path=st.text(alphabet=string.ascii_letters + string.digits + "-_/.~%", min_size=8, max_size=40),
       query=st.text(alphabet=string.ascii_letters + string.digits + "-_=&/?@", max_size=30))
def test_mask_ping_url_never_shows_the_path_or_the_query(path: str, query: str) -> None:
    masked = mask_ping_url(f"https://hc-ping.com/{path}" + (f"?{query}" if query else ""))
    assert masked in ("https://hc-ping.com/***", "https://hc-ping.com", "https://***/***")


def test_a_bad_ping_url_is_refused_without_showing_its_path(registry: Registry) -> None:
    with pytest.raises(JobDefinitionError, match="'job': ping_url") as raised:
        mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=f"ftp://hc-ping.com/{PING_TOKEN}")(print)
    assert_hidden(PING_TOKEN, exception_texts(raised.value))


def test_a_jobs_repr_shows_its_ping_url_masked(registry: Registry) -> None:
    mutex_cron("0 6 * * *", name="job", registry=registry, ping_url=f"https://hc-ping.com/{PING_TOKEN}")(print)
    job = registry.get("job")
    assert "'https://hc-ping.com/***'" in repr(job) and PING_TOKEN not in repr(job)
    assert job.ping_url == f"https://hc-ping.com/{PING_TOKEN}"  # the URL itself is whole

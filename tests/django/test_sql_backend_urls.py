"""The three SQL backends read ``django://[alias]`` one way: a malformed URL or an unknown alias is a
StoreConfigError naming the URL (masked), and database errors become StoreUnavailable one way."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connections, transaction

from mutexcron import StoreConfigError
from mutexcron.errors import StoreUnavailable
from mutexcron.stores import store_from_url
from mutexcron.tasks import TaskQueue
from mutexcron_django.sql.databases import sql_errors
from mutexcron_django.sql.store import DjangoLockStore
from mutexcron_django.sql.tasks.backend import DjangoTaskBackend
from mutexcron_django.sql.tasks.records import DjangoTaskRecords

BUILDERS: dict[str, Callable[[str], object]] = {
    "lock store": store_from_url,
    "task backend": lambda url: TaskQueue(url).backend,
    "cancel store": DjangoTaskRecords.from_url,
}


@pytest.mark.parametrize("what", BUILDERS)
@pytest.mark.parametrize(("url", "message"), [
    ("django://nowhere", "no database alias 'nowhere'"),
    ("django://default/extra", "malformed"),
    ("django://default?colour=blue", "malformed"),
    ("django://default#part", "malformed"),
    ("django://user:s3cret@default", "no database alias '***@default'"),
    ("django://user:s3cret@default/x", "malformed"),
])
def test_a_bad_django_url_is_a_config_error_naming_it_masked(what: str, url: str, message: str) -> None:
    with pytest.raises(StoreConfigError) as raised:
        BUILDERS[what](url)
    text = str(raised.value)
    assert message in text and "s3cret" not in text
    assert repr(url.replace("user:s3cret", "***")) in text  # the URL as given, masked


@pytest.mark.parametrize("url", ["django://", "django://default", "django://default/", "django:///"])
def test_a_good_django_url_picks_the_alias_for_each_backend(url: str) -> None:
    assert isinstance(store_from_url(url), DjangoLockStore)
    for backend in (DjangoLockStore.from_url(url), DjangoTaskBackend.from_url(url), DjangoTaskRecords.from_url(url)):
        assert backend.using == "default"


@pytest.mark.parametrize("build", [DjangoLockStore, DjangoTaskBackend, DjangoTaskRecords])
def test_an_unknown_alias_given_in_code_is_a_config_error(build: Callable[[str], Any]) -> None:
    with pytest.raises(StoreConfigError, match=r"^django://nowhere: no database alias 'nowhere' \(DATABASES has "):
        build("nowhere")


@pytest.mark.django_db(transaction=True, databases=["default"])
def test_a_database_error_is_store_unavailable_and_drops_a_broken_connection_outside_a_transaction(
        monkeypatch: pytest.MonkeyPatch) -> None:
    closed: list[bool] = []
    connection = connections["default"]
    monkeypatch.setattr(connection, "close_if_unusable_or_obsolete", lambda: closed.append(True))
    with pytest.raises(StoreUnavailable, match=r"^somewhere: OperationalError: gone$"), \
            sql_errors("default", "somewhere"):
        raise OperationalError("gone")
    assert closed == [True]
    with transaction.atomic(using="default"), pytest.raises(StoreUnavailable), sql_errors("default", "somewhere"):
        raise OperationalError("gone")
    assert closed == [True]  # never inside the caller's transaction

"""Scheduler.shutdown() at random moments on the SQL lock store (PostgreSQL), as tests/scheduling/test_shutdown.py does
on the other stores: the store the issue's hang was seen on."""

from __future__ import annotations

import pytest

from mutexcron_django.runtime import fresh_connections
from mutexcron_django.sql.store import DjangoLockStore
from tests.scheduling.test_shutdown import SlowStore, shut_down_many_times


@pytest.mark.django_db(transaction=True, databases=["postgres"])
def test_shutdown_at_random_moments_on_postgresql_returns_in_time_and_leaves_nothing_behind() -> None:
    store = SlowStore(DjangoLockStore("postgres"), acquire_latency=(0.002, 0.03))
    shut_down_many_times(store, 40, fire_context=fresh_connections)  # the worker threads close their connections

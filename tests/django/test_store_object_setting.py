"""A LockStore object given as ``MUTEXCRON["STORE"]`` is the user's, shared with the rest of the process: the
commands and the checks that open the configured store leave it open (a store they build from a URL they close)."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.checks import run_checks
from django.core.management import call_command
from django.test import override_settings

from mutexcron.stores import MemoryLockStore
from tests.django.jobhelpers import Declarations

JOB = "store-object.daily"


class ClosableStore(MemoryLockStore):
    """A memory store that says whether anyone closed it."""

    closed = False

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def store(declare: Declarations) -> ClosableStore:
    declare("0 6 * * *", name=JOB)
    return ClosableStore()


def mutexcron(store: ClosableStore, *args: str) -> str:
    out = StringIO()
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        call_command("mutexcron", *args, stdout=out, stderr=StringIO())
    return out.getvalue()


@pytest.mark.parametrize("args", [("list",), ("seed",), ("unlock", JOB), ("health",)], ids=" ".join)
def test_a_command_leaves_a_store_object_of_the_settings_open(store: ClosableStore, args: tuple[str, ...]) -> None:
    mutexcron(store, *args)

    assert not store.closed
    store.seed([JOB])
    assert store.lock(JOB) is not None


def test_the_checks_leave_a_store_object_of_the_settings_open(store: ClosableStore) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        run_checks(tags=["mutexcron"], include_deployment_checks=True, databases=["default"])

    assert not store.closed
    store.seed([JOB])
    assert store.lock(JOB) is not None

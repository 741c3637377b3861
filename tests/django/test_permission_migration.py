"""Migration 0017 (issue 33): the Lock model's permission to re-time a job, ``change_schedule`` before, becomes
``retime_lock`` with its grants (users and groups), so that a site which granted re-timing keeps it and gains no
right over run-time schedules (the Schedule proxy's ``change_schedule``); migrating back gives it back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import Group, Permission
from django.contrib.contenttypes.models import ContentType
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from mutexcron_django.models import Lock, Schedule

BEFORE = ("mutexcron", "0016_lock_tick_token")
OLD_NAME = "Can change a job's schedule"


def migrate_to(*targets: tuple[str, str]) -> None:
    """Migrate the default database to ``targets`` (none: the latest of every app)."""
    executor = MigrationExecutor(connection)
    executor.migrate(list(targets) or executor.loader.graph.leaf_nodes())
    ContentType.objects.clear_cache()


@pytest.fixture
def before_the_rename() -> Iterator[None]:
    """The database as migration 0016 left it (then back to the latest, whatever the test did)."""
    migrate_to(BEFORE)
    yield
    migrate_to()


def lock_permission(codename: str) -> Permission | None:
    lock_type = ContentType.objects.get_for_model(Lock)
    return Permission.objects.filter(content_type=lock_type, codename=codename).first()


def can(django_user_model: Any, username: str, permission: str) -> bool:
    return bool(django_user_model.objects.get(username=username).has_perm(permission))  # read afresh: no cache


def user_holding(django_user_model: Any, username: str, *permissions: Permission | None) -> Any:
    user = django_user_model.objects.create_user(username)
    user.user_permissions.add(*(permission for permission in permissions if permission is not None))
    return user


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("before_the_rename")
def test_the_users_and_groups_who_could_retime_jobs_still_can_and_cannot_edit_run_time_schedules(
        django_user_model: Any) -> None:
    old = lock_permission("change_schedule")
    assert old is not None and old.name == OLD_NAME and lock_permission("retime_lock") is None
    schedule_editor = Permission.objects.get(content_type=ContentType.objects.get_for_model(
        Schedule, for_concrete_model=False), codename="change_schedule")
    user_holding(django_user_model, "alice", old)
    operators = Group.objects.create(name="operators")
    operators.permissions.add(old)
    user_holding(django_user_model, "bob").groups.add(operators)
    user_holding(django_user_model, "carol", schedule_editor)

    migrate_to()

    renamed = lock_permission("retime_lock")
    assert renamed is not None and renamed.pk == old.pk and lock_permission("change_schedule") is None
    assert renamed.name == "Can re-time a job (override its schedule)"
    for username in ("alice", "bob"):
        assert can(django_user_model, username, "mutexcron.retime_lock")
        assert not can(django_user_model, username, "mutexcron.change_schedule")
    assert can(django_user_model, "carol", "mutexcron.change_schedule")
    assert not can(django_user_model, "carol", "mutexcron.retime_lock")


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("before_the_rename")
def test_grants_of_the_old_permission_join_a_retime_lock_created_already(django_user_model: Any) -> None:
    # Django creates a model's missing permissions after every migrate (post_migrate): `migrate otherapp` with
    # the new code makes retime_lock before this migration runs.
    old = lock_permission("change_schedule")
    assert old is not None
    new = Permission.objects.create(content_type=ContentType.objects.get_for_model(Lock), codename="retime_lock",
                                    name="Can re-time a job (override its schedule)")
    user_holding(django_user_model, "alice", old)
    user_holding(django_user_model, "dave", new)
    user_holding(django_user_model, "erin", old, new)
    operators = Group.objects.create(name="operators")
    operators.permissions.add(old)
    user_holding(django_user_model, "bob").groups.add(operators)

    migrate_to()

    assert lock_permission("change_schedule") is None and lock_permission("retime_lock") == new
    for username in ("alice", "bob", "dave", "erin"):
        assert can(django_user_model, username, "mutexcron.retime_lock"), username
        assert not can(django_user_model, username, "mutexcron.change_schedule"), username
    assert list(django_user_model.objects.get(username="erin").user_permissions.all()) == [new]


@pytest.mark.django_db(transaction=True)
def test_migrating_back_gives_the_grants_back_to_the_old_codename(django_user_model: Any) -> None:
    user_holding(django_user_model, "frank", lock_permission("retime_lock"))
    try:
        migrate_to(BEFORE)

        assert lock_permission("retime_lock") is None
        assert can(django_user_model, "frank", "mutexcron.change_schedule")
    finally:
        migrate_to()
    assert can(django_user_model, "frank", "mutexcron.retime_lock")

"""One permission per power in the admin (issue 33): each power is tried, on every path that exercises it (its page,
its form, its POST), by staff users who each hold ONE of the app's permissions, every one of them in turn; only the
permissions named for the power get through, the others get 403 and change nothing.

The Lock model's ``retime_lock`` (re-time a job) and the Schedule proxy's ``change_schedule`` (rewrite a run-time
schedule) are told apart: before, the Lock's was also named ``change_schedule`` and granted both."""

from __future__ import annotations

import html
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client

from mutexcron.definitions import ScheduleDefinition
from mutexcron.stores import LockState
from mutexcron_django.runtime import build_scheduler
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations
from tests.django.schedule_targets import PURGE, SEND, targets  # noqa: F401  (a fixture)

LOCKS_URL = "/admin/mutexcron/lock/"
SCHEDULES_URL = "/admin/mutexcron/schedule/"
JOB = "perms.digest"  # declared in code
NAME = "perms.report"  # a run-time schedule
RAN: list[str] = []

Path = Callable[[Client], Any]  # a request made with the client: its response


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def post(url: str, **data: Any) -> Path:
    return lambda client: client.post(url, data)


def get(url: str) -> Path:
    return lambda client: client.get(url)


def label(permission: Permission) -> str:
    """``<model>.<codename>``: Lock's and Schedule's permissions apart even where codenames were shared."""
    return f"{permission.content_type.model}.{permission.codename}"


def staff_with(django_user_model: Any, username: str, *permissions: Permission) -> Client:
    user = django_user_model.objects.create_user(username, is_staff=True)
    user.user_permissions.add(*permissions)
    client = Client()
    client.force_login(user)
    return client


def granted_by(django_user_model: Any, paths: dict[str, Path]) -> set[str]:
    """The permissions (labels) that let a staff user holding only that one through ``paths`` (anything but 403),
    each tried by a user of its own, named as its label; one that passes some paths and not others fails the test
    (a path that checks another permission, or none)."""
    granted = set()
    candidates: list[Permission | None] = [None, *Permission.objects.filter(
        content_type__app_label="mutexcron").select_related("content_type").order_by("content_type__model", "codename")]
    for permission in candidates:
        name = label(permission) if permission is not None else "nothing"
        client = staff_with(django_user_model, name, *([permission] if permission is not None else []))
        statuses = {what: path(client).status_code for what, path in paths.items()}
        passed = {what for what, status in statuses.items() if status != 403}
        assert passed in (set(), set(paths)), f"{name}: {statuses}"
        if passed:
            granted.add(name)
    return granted


def done_by(message_start: str) -> list[str]:
    """Who made the changes the admin logged with a message starting so."""
    return list(LogEntry.objects.filter(change_message__startswith=message_start)
                .values_list("user__username", flat=True))


def state_of(name: str) -> LockState | None:
    return DjangoLockStore().lock(name)


def definition_of(name: str) -> ScheduleDefinition:
    state = state_of(name)
    assert state is not None and state.definition is not None
    return ScheduleDefinition.from_json(state.definition)


def form_data(name: str = NAME, **fields: str) -> dict[str, str]:
    return {"name": name, "target": SEND, "spec": "0 7 * * 1-5", "kwargs": '{"to": "ops@example.com"}',
            "timezone": "", "lease": "600", "catch_up": "skip", "run_on": "here", **fields}


@pytest.fixture(autouse=True)
def site(settings: Any, declare: Declarations, targets: list[str]) -> Iterator[None]:  # noqa: F811
    """The SQL store; job JOB declared (its body notes each run) and run-time schedule NAME stored."""
    settings.MUTEXCRON = {"AUTOSTART": False}
    RAN.clear()
    declare("30 6 * * 1-5", lambda: RAN.append(JOB), name=JOB)
    scheduler = build_scheduler()
    try:
        scheduler.add_schedule(NAME, "0 7 * * 1-5", SEND, kwargs={"to": "ops@example.com"}, by="setup")
    finally:
        scheduler.shutdown()
    yield


# -- the Locks page -------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_view_lock_or_change_lock_shows_the_locks_page_a_jobs_page_and_its_timeline(
        django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the Locks page": get(LOCKS_URL), "the job's page": get(f"{LOCKS_URL}{JOB}/history/"),
        "its timeline": get(f"{LOCKS_URL}{JOB}/timeline/"),
    }) == {"lock.view_lock", "lock.change_lock"}


@pytest.mark.django_db
def test_only_change_lock_runs_a_job_now_or_backfills_it(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "run now": post(f"{LOCKS_URL}run/", name=JOB), "the backfill form": post(f"{LOCKS_URL}backfill/", name=JOB),
    }) == {"lock.change_lock"}
    assert RAN == [JOB]
    assert done_by("Ran now") == ["lock.change_lock"]


@pytest.mark.django_db
def test_only_pause_lock_pauses_and_resumes_a_job_or_many(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the pause form": post(f"{LOCKS_URL}pause/", name=JOB),
        "pause": post(f"{LOCKS_URL}pause/", name=JOB, confirm="yes"),
        "resume": post(f"{LOCKS_URL}resume/", name=JOB, confirm="yes"),
        "bulk pause": post(f"{LOCKS_URL}bulk/", action="pause_selected", names=[JOB, NAME], confirm="yes"),
        "bulk resume": post(f"{LOCKS_URL}bulk/", action="resume_selected", names=[JOB, NAME], confirm="yes"),
    }) == {"lock.pause_lock"}
    assert set(done_by("Paused")) == set(done_by("Resumed")) == {"lock.pause_lock"}


@pytest.mark.django_db
def test_only_retime_lock_changes_or_resets_a_jobs_schedule(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the schedule form": post(f"{LOCKS_URL}schedule/", name=JOB),
        "change it": post(f"{LOCKS_URL}schedule/", name=JOB, spec="0 8 * * *", confirm="yes"),
        "reset it": post(f"{LOCKS_URL}reset-schedule/", name=JOB, confirm="yes"),
    }) == {"lock.retime_lock"}
    assert done_by("Schedule set to") == done_by("Schedule reset") == ["lock.retime_lock"]


@pytest.mark.django_db
def test_only_force_unlock_lock_force_unlocks_a_job(django_user_model: Any) -> None:
    store = DjangoLockStore()
    assert store.acquire(JOB, owner="elsewhere", lease=timedelta(minutes=5), fire_time=None).acquired

    assert granted_by(django_user_model, {
        "the confirmation": post(f"{LOCKS_URL}force-unlock/", name=JOB),
        "force-unlock": post(f"{LOCKS_URL}force-unlock/", name=JOB, confirm="yes"),
    }) == {"lock.force_unlock_lock"}
    assert not store.lock(JOB).locked  # type: ignore[union-attr]
    assert done_by("Force-unlocked") == ["lock.force_unlock_lock"]


# -- the Run-time schedules page --------------------------------------------------------------------------------


@pytest.mark.django_db
def test_only_view_schedule_or_change_schedule_lists_the_run_time_schedules(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {"the list": get(SCHEDULES_URL)}) == {
        "schedule.view_schedule", "schedule.change_schedule"}


@pytest.mark.django_db
def test_only_add_schedule_adds_a_run_time_schedule(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the form": get(f"{SCHEDULES_URL}add/"), "add": post(f"{SCHEDULES_URL}add/", **form_data("perms.added")),
    }) == {"schedule.add_schedule"}
    assert state_of("perms.added").schedule_by == "schedule.add_schedule"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_only_change_schedule_edits_disables_or_enables_a_run_time_schedule(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the form": get(f"{SCHEDULES_URL}{NAME}/change/"),
        "edit": post(f"{SCHEDULES_URL}{NAME}/change/", **form_data(target=PURGE, kwargs='{"days": 3}')),
        "disable": post(f"{SCHEDULES_URL}disable/", name=NAME), "enable": post(f"{SCHEDULES_URL}enable/", name=NAME),
    }) == {"schedule.change_schedule"}
    assert (definition_of(NAME).target, definition_of(NAME).kwargs) == (PURGE, {"days": 3})
    assert done_by("Changed") == ["schedule.change_schedule"]


@pytest.mark.django_db
def test_only_delete_schedule_deletes_a_run_time_schedule(django_user_model: Any) -> None:
    assert granted_by(django_user_model, {
        "the confirmation": get(f"{SCHEDULES_URL}{NAME}/delete/"), "delete": post(f"{SCHEDULES_URL}{NAME}/delete/"),
    }) == {"schedule.delete_schedule"}
    assert state_of(NAME) is None


# -- the power that was shared ----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_permission_to_retime_jobs_cannot_rewrite_what_a_run_time_schedule_calls(django_user_model: Any) -> None:
    retimer = staff_with(django_user_model, "retimer", *Permission.objects.filter(
        content_type__model="lock", codename__in=["view_lock", "retime_lock"]))

    edit = retimer.post(f"{SCHEDULES_URL}{NAME}/change/", form_data(target=PURGE, kwargs='{"days": 1}'))

    assert edit.status_code == 403
    assert (definition_of(NAME).target, definition_of(NAME).kwargs) == (SEND, {"to": "ops@example.com"})
    assert retimer.post(f"{LOCKS_URL}schedule/", {"name": NAME, "spec": "0 9 * * *", "confirm": "yes"}
                        ).status_code == 302  # what it does allow: the run-time schedule re-timed
    assert state_of(NAME).schedule == "0 9 * * *"  # type: ignore[union-attr]
    assert definition_of(NAME).target == SEND


@pytest.mark.django_db
def test_the_pages_offer_each_action_only_to_its_permission(django_user_model: Any) -> None:
    def client(*codenames: str) -> Client:
        return staff_with(django_user_model, "-".join(codenames), *Permission.objects.filter(
            content_type__app_label="mutexcron", codename__in=codenames))

    def job_row(page: str) -> str:
        start = page.index(f'data-job="{JOB}"')
        return page[start:page.index("</tr>", start)]

    buttons = {"change_lock": ['value="Run now"', 'value="Backfill…"'], "pause_lock": ['value="Pause…"'],
               "retime_lock": ['value="Change schedule…"']}
    for codename, shown in buttons.items():
        row = job_row(text(client("view_lock", codename).get(LOCKS_URL)))
        every = [button for buttons_of in buttons.values() for button in buttons_of]
        assert [button for button in every if button in row] == shown, codename
    links = {"add_schedule": ['id="mutexcron-add-schedule"'],
             "change_schedule": ['class="button mutexcron-edit"', 'name="disable"'],
             "delete_schedule": ['class="deletelink mutexcron-delete"']}
    for codename, shown in links.items():
        page = text(client("view_schedule", codename).get(SCHEDULES_URL))
        every = [link for links_of in links.values() for link in links_of]
        assert [link for link in every if link in page] == shown, codename
    assert 'class="button mutexcron-edit"' not in text(client("view_schedule", "retime_lock").get(SCHEDULES_URL))


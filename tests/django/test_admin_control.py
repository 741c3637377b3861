"""The Locks page's control actions (issue 9): the spec in plain words with its next fires, pause and resume,
change and reset a schedule, bulk pause and resume, their permissions, and the changes on the job's page."""

from __future__ import annotations

import html
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone

from mutexcron import next_fire_times
from mutexcron.stores import LockState, LockStore
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations
from tests.django.test_admin import redis_store  # noqa: F401  (a fixture)
from tests.support import wait_until

LOCKS_URL = "/admin/mutexcron/lock/"
PAUSE_URL = LOCKS_URL + "pause/"
RESUME_URL = LOCKS_URL + "resume/"
SCHEDULE_URL = LOCKS_URL + "schedule/"
RESET_URL = LOCKS_URL + "reset-schedule/"
BULK_URL = LOCKS_URL + "bulk/"
ACTION_URLS = (PAUSE_URL, RESUME_URL, SCHEDULE_URL, RESET_URL, BULK_URL)


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def row_of(page: str, name: str) -> str:
    start = page.index(f'data-job="{name}"')
    return page[start : page.index("</tr>", start)]


def state_of(name: str, store: LockStore | None = None) -> LockState | None:
    return (store or DjangoLockStore()).lock(name)


def job_page(client: Client, name: str) -> str:
    response = client.get(f"{LOCKS_URL}{name}/history/")
    assert response.status_code == 200
    return text(response)


def user_with(django_user_model: Any, username: str, *codenames: str) -> Client:
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="mutexcron", codename__in=["view_lock", "change_lock", *codenames]))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def job(declare: Declarations) -> str:
    return declare("30 6 * * 1-5", name="control.digest", timezone="Europe/Paris")


# -- the Locks page -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_spec_is_in_plain_words_with_its_next_five_fires_on_hover(admin_client: Client, job: str,
                                                                       declare: Declarations) -> None:
    declare("*/3 * * * * *", name="control.seconds")
    before = datetime.now(UTC)

    page = text(admin_client.get(LOCKS_URL))

    row = row_of(page, job)
    assert "At 06:30, Monday through Friday" in row
    fires = next_fire_times("30 6 * * 1-5", after=before, count=5, timezone="Europe/Paris")
    title = row[row.index('title="Next fires:'):]
    for fire in fires:
        assert fire.strftime("%Y-%m-%d %H:%M:%S %Z") in title
    assert "Every 3 seconds" in row_of(page, "control.seconds")  # six fields: seconds first


@pytest.mark.django_db
def test_an_admin_sees_every_action_and_the_bulk_actions(admin_client: Client, job: str) -> None:
    page = text(admin_client.get(LOCKS_URL))

    row = row_of(page, job)
    assert 'value="Pause…"' in row and 'value="Change schedule…"' in row
    assert 'value="Resume…"' not in row and 'value="Reset schedule…"' not in row  # not paused, not overridden
    assert 'id="mutexcron-bulk"' in page and "Pause selected jobs" in page and 'name="names"' in row


# -- pause and resume -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_pause_for_a_duration_after_a_confirmation_page(admin_client: Client, job: str) -> None:
    form = admin_client.post(PAUSE_URL, {"name": job})

    assert form.status_code == 200 and 'id="mutexcron-confirm"' in text(form)
    assert not (state_of(job) and state_of(job).paused)  # type: ignore[union-attr]
    before = timezone.now()

    response = admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes", "duration": "2h30m"})

    assert response.status_code == 302
    state = state_of(job)
    assert state is not None and state.paused and state.paused_by == "admin"
    assert state.paused_until is not None
    later = timedelta(hours=2, minutes=30)
    assert before + later <= state.paused_until <= timezone.now() + later
    row = row_of(text(admin_client.get(LOCKS_URL)), job)
    assert "mutexcron-badge-paused" in row and "Paused until" in row
    assert "Paused since" in row and "by admin" in row
    assert 'value="Resume…"' in row and 'value="Pause…"' not in row
    entry = LogEntry.objects.get(object_id=job)
    assert entry.user.get_username() == "admin" and entry.get_change_message().startswith("Paused until ")
    assert "Paused until" in job_page(admin_client, job) and "admin" in job_page(admin_client, job)


@pytest.mark.django_db
def test_a_pause_keeps_the_operators_note_shown_with_the_lock(admin_client: Client, job: str) -> None:
    response = admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes", "note": "vendor outage INC-77"})

    assert response.status_code == 302
    state = state_of(job)
    assert state is not None and state.paused and state.pause_note == "vendor outage INC-77"
    assert "vendor outage INC-77" in row_of(text(admin_client.get(LOCKS_URL)), job)
    assert "vendor outage INC-77" in job_page(admin_client, job)


@pytest.mark.django_db
def test_pause_until_a_time_and_until_resumed(admin_client: Client, job: str, declare: Declarations) -> None:
    until = timezone.localtime(timezone.now() + timedelta(days=2)).replace(microsecond=0, second=0)
    admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes", "until_0": until.strftime("%Y-%m-%d"),
                                  "until_1": until.strftime("%H:%M:%S")})
    other = declare("0 * * * *", name="control.hourly")
    admin_client.post(PAUSE_URL, {"name": other, "confirm": "yes"})

    state = state_of(job)
    assert state is not None and state.paused_until == until
    indefinite = state_of(other)
    assert indefinite is not None and indefinite.paused and indefinite.paused_until is None
    assert "until resumed" in row_of(text(admin_client.get(LOCKS_URL)), other)


@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "error"), [
    ({"duration": "soon"}, "is not a duration"),
    ({"duration": "1h", "until_0": "2999-01-01", "until_1": "00:00:00"}, "not both"),
    ({"until_0": "2000-01-01", "until_1": "00:00:00"}, "already passed"),
])
def test_a_bad_pause_end_is_shown_on_the_form_and_changes_nothing(admin_client: Client, job: str,
                                                                  fields: dict[str, str], error: str) -> None:
    response = admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes", **fields})

    assert response.status_code == 200 and error in text(response)
    state = state_of(job)
    assert state is None or not state.paused
    assert not LogEntry.objects.exists()


@pytest.mark.django_db
def test_resume_after_a_confirmation_page(admin_client: Client, job: str) -> None:
    admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes"})

    confirmation = admin_client.post(RESUME_URL, {"name": job})
    assert confirmation.status_code == 200 and "Paused since" in text(confirmation)
    assert state_of(job).paused  # type: ignore[union-attr]

    assert admin_client.post(RESUME_URL, {"name": job, "confirm": "yes"}).status_code == 302
    state = state_of(job)
    assert state is not None and not state.paused
    assert "mutexcron-badge-paused" not in row_of(text(admin_client.get(LOCKS_URL)), job)
    assert [entry.get_change_message() for entry in LogEntry.objects.order_by("pk")][-1] == "Resumed"
    assert "Resumed" in job_page(admin_client, job)


# -- schedules ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_schedule_form_shows_the_code_spec_and_a_bad_spec_error(admin_client: Client, job: str) -> None:
    form = text(admin_client.post(SCHEDULE_URL, {"name": job}))
    assert 'value="30 6 * * 1-5"' in form and 'id="mutexcron-code-spec-cell">30 6 * * 1-5' in form

    bad = admin_client.post(SCHEDULE_URL, {"name": job, "spec": "61 * * * *", "timezone": "", "confirm": "yes"})

    assert bad.status_code == 200
    assert "61" in text(bad) and "errorlist" in text(bad) and "mutexcron-preview-fire" not in text(bad)
    zone = admin_client.post(SCHEDULE_URL, {"name": job, "spec": "0 * * * *", "timezone": "Mars/Olympus",
                                            "confirm": "yes"})
    assert "Mars/Olympus" in text(zone) and "errorlist" in text(zone)
    assert state_of(job) is None or state_of(job).schedule is None  # type: ignore[union-attr]


@pytest.mark.django_db
def test_preview_then_save_a_schedule_then_reset_it(admin_client: Client, job: str) -> None:
    before = datetime.now(UTC)
    preview = text(admin_client.post(SCHEDULE_URL, {"name": job, "spec": "*/20 9-17 * * *", "timezone": "",
                                                     "preview": "Preview"}))

    assert "Every 20 minutes, between 09:00 and 17:59" in preview
    for fire in next_fire_times("*/20 9-17 * * *", after=before, count=5, timezone="Europe/Paris"):
        assert fire.strftime("%Y-%m-%d %H:%M:%S %Z") in preview
    assert preview.count('class="mutexcron-preview-fire"') == 5
    assert state_of(job) is None or state_of(job).schedule is None  # type: ignore[union-attr]

    saved = admin_client.post(SCHEDULE_URL, {"name": job, "spec": "*/20 9-17 * * *", "timezone": "Asia/Tokyo",
                                             "confirm": "yes"})

    assert saved.status_code == 302
    state = state_of(job)
    assert state is not None and state.schedule == "*/20 9-17 * * *" and state.schedule_timezone == "Asia/Tokyo"
    assert state.schedule_by == "admin" and state.schedule_version == 1
    row = row_of(text(admin_client.get(LOCKS_URL)), job)
    assert "Schedule overridden" in row and "code: <code>30 6 * * 1-5</code>" in row and "Asia/Tokyo" in row
    assert 'value="Reset schedule…"' in row

    confirmation = admin_client.post(RESET_URL, {"name": job})
    assert confirmation.status_code == 200 and state_of(job).schedule is not None  # type: ignore[union-attr]
    assert admin_client.post(RESET_URL, {"name": job, "confirm": "yes"}).status_code == 302
    reset = state_of(job)
    assert reset is not None and reset.schedule is None and reset.schedule_version == 2
    messages = [entry.get_change_message() for entry in LogEntry.objects.order_by("pk")]
    assert messages == ["Schedule set to “*/20 9-17 * * *” in Asia/Tokyo (version 1)",
                        "Schedule reset to the code's (version 2)"]
    page = job_page(admin_client, job)
    assert all(message in page for message in messages)


# -- bulk -----------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_bulk_pause_and_resume_with_a_confirmation_page(admin_client: Client, job: str,
                                                        declare: Declarations) -> None:
    other = declare("0 * * * *", name="control.hourly")
    declare("0 0 * * *", name="control.untouched")
    names = {"names": [job, other]}

    confirmation = admin_client.post(BULK_URL, {"action": "pause_selected", **names})
    assert confirmation.status_code == 200
    assert job in text(confirmation) and other in text(confirmation)
    assert not any(state and state.paused for state in map(state_of, [job, other]))

    assert admin_client.post(BULK_URL, {"action": "pause_selected", "confirm": "yes", "duration": "1h",
                                        **names}).status_code == 302
    assert all(state and state.paused and state.paused_until for state in map(state_of, [job, other]))
    untouched = state_of("control.untouched")
    assert untouched is None or not untouched.paused

    admin_client.post(BULK_URL, {"action": "resume_selected", "confirm": "yes", **names})
    assert not any(state and state.paused for state in map(state_of, [job, other]))
    assert LogEntry.objects.count() == 4


@pytest.mark.django_db
def test_a_bulk_pause_that_fails_on_one_job_still_pauses_the_others(admin_client: Client, job: str) -> None:
    unknown = "control.aaa-gone"  # sorted first; neither declared here nor in the store: UnknownJobError

    response = admin_client.post(BULK_URL, {"action": "pause_selected", "confirm": "yes", "duration": "1h",
                                            "names": [unknown, job]}, follow=True)

    page = text(response)
    assert f"Could not pause “{unknown}”" in page
    state = state_of(job)
    assert state is not None and state.paused


@pytest.mark.django_db
def test_a_pause_whose_end_has_passed_offers_pause_not_resume(admin_client: Client, job: str) -> None:
    store = DjangoLockStore()
    store.seed([job])
    until = store.now() + timedelta(milliseconds=200)
    store.pause(job, until=until)
    wait_until(lambda: store.now() > until, timeout=3, what="the pause's end")

    row = row_of(text(admin_client.get(LOCKS_URL)), job)

    assert 'value="Pause…"' in row and 'value="Resume…"' not in row


@pytest.mark.django_db
def test_bulk_without_a_selection_or_with_an_unknown_action(admin_client: Client, job: str) -> None:
    assert admin_client.post(BULK_URL, {"action": "pause_selected"}).status_code == 302
    assert admin_client.post(BULK_URL, {"action": "delete_selected", "names": [job]}).status_code == 400
    assert not LogEntry.objects.exists()


# -- safety: methods, permissions, CSRF ---------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("url", ACTION_URLS)
def test_get_changes_nothing(admin_client: Client, job: str, url: str) -> None:
    response = admin_client.get(url, {"name": job, "names": job, "confirm": "yes", "spec": "* * * * *",
                                      "action": "pause_selected"})

    assert response.status_code == 405
    assert state_of(job) is None
    assert not LogEntry.objects.exists()


@pytest.mark.django_db
def test_without_the_permissions_no_buttons_and_403(django_user_model: Any, job: str) -> None:
    client = user_with(django_user_model, "viewer")

    page = text(client.get(LOCKS_URL))

    row = row_of(page, job)
    for button in ("Pause…", "Resume…", "Change schedule…", "Reset schedule…"):
        assert f'value="{button}"' not in row
    assert 'id="mutexcron-bulk"' not in page and 'name="names"' not in page
    for url, data in [(PAUSE_URL, {"name": job, "confirm": "yes"}), (RESUME_URL, {"name": job, "confirm": "yes"}),
                      (SCHEDULE_URL, {"name": job, "spec": "* * * * *", "confirm": "yes"}),
                      (RESET_URL, {"name": job, "confirm": "yes"}),
                      (BULK_URL, {"action": "pause_selected", "names": [job], "confirm": "yes"})]:
        assert client.post(url, data).status_code == 403, url
    assert state_of(job) is None


@pytest.mark.django_db
def test_each_permission_allows_its_own_actions_only(django_user_model: Any, job: str) -> None:
    pauser = user_with(django_user_model, "pauser", "pause_lock")
    scheduler = user_with(django_user_model, "scheduler", "retime_lock")

    assert 'value="Change schedule…"' not in row_of(text(pauser.get(LOCKS_URL)), job)
    assert pauser.post(SCHEDULE_URL, {"name": job}).status_code == 403
    assert pauser.post(PAUSE_URL, {"name": job, "confirm": "yes"}).status_code == 302
    assert state_of(job).paused_by == "pauser"  # type: ignore[union-attr]

    row = row_of(text(scheduler.get(LOCKS_URL)), job)
    assert 'value="Resume…"' not in row and 'value="Change schedule…"' in row
    assert scheduler.post(RESUME_URL, {"name": job, "confirm": "yes"}).status_code == 403
    assert scheduler.post(BULK_URL, {"action": "resume_selected", "names": [job]}).status_code == 403
    assert scheduler.post(SCHEDULE_URL, {"name": job, "spec": "0 7 * * *", "confirm": "yes"}).status_code == 302
    assert state_of(job).schedule_by == "scheduler"  # type: ignore[union-attr]


@pytest.mark.django_db
def test_the_actions_need_a_csrf_token(admin_user: Any, job: str) -> None:
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(PAUSE_URL, {"name": job, "confirm": "yes"}).status_code == 403
    assert state_of(job) is None


# -- any store --------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_actions_go_through_the_configured_store(
    admin_client: Client, job: str, redis_store: LockStore,  # noqa: F811  (the fixture imported above)
) -> None:
    admin_client.post(PAUSE_URL, {"name": job, "confirm": "yes"})
    admin_client.post(SCHEDULE_URL, {"name": job, "spec": "0 8 * * *", "confirm": "yes"})

    state = redis_store.lock(job)
    assert state is not None and state.paused and state.schedule == "0 8 * * *"
    assert state_of(job) is None  # not the SQL table
    row = row_of(text(admin_client.get(LOCKS_URL)), job)
    assert "mutexcron-badge-paused" in row and "Schedule overridden" in row and "At 08:00" in row
    assert "Paused since" in job_page(admin_client, job)

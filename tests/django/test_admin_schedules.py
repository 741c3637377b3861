"""The admin's Run-time schedules page (issue 21): list, add, edit, enable, disable and delete the schedules kept in
the store, the target chosen from the allowed ones, kwargs validated as JSON against its signature, the spec in
words; the Schedule model's permissions; and run-time schedules on the Locks page, as jobs."""

from __future__ import annotations

import html
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.auth.models import Permission
from django.test import Client

from mutexcron.stores import LockState
from mutexcron_django.runtime import build_scheduler
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.jobhelpers import Declarations
from tests.django.schedule_targets import PURGE, SEND, SENT, targets  # noqa: F401  (a fixture)

URL = "/admin/mutexcron/schedule/"
ADD_URL = URL + "add/"
ENABLE_URL = URL + "enable/"
DISABLE_URL = URL + "disable/"
LOCKS_URL = "/admin/mutexcron/lock/"
NAME = "ops.report"


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def row_of(page: str, name: str, attribute: str = "data-schedule") -> str:
    start = page.index(f'{attribute}="{name}"')
    return page[start : page.index("</tr>", start)]


def field_errors(page: str, field: str) -> str:
    """The HTML of the form row of ``field`` if it shows errors (else "")."""
    marker = f'form-row field-{field} errors"'
    if marker not in page:
        return ""
    start = page.index(marker)
    return page[start : page.index("</div>", page.index("flex-container", start))]


def state_of(name: str = NAME) -> LockState | None:
    return DjangoLockStore().lock(name)


def add_schedule(name: str = NAME, spec: str = "0 7 * * 1-5", **options: Any) -> LockState:
    """A run-time schedule added as another process would (not through the page)."""
    scheduler = build_scheduler()
    try:
        options.setdefault("kwargs", {"to": "ops@example.com"})
        return scheduler.add_schedule(name, spec, SEND, **options)
    finally:
        scheduler.shutdown()


def form_data(**fields: str) -> dict[str, str]:
    return {"name": NAME, "target": SEND, "spec": "0 7 * * 1-5", "kwargs": '{"to": "ops@example.com"}',
            "timezone": "", "lease": "600", "catch_up": "skip", "run_on": "here", **fields}


def user_with(django_user_model: Any, username: str, *codenames: str) -> Client:
    """A staff user with the Schedule model's permissions ``codenames`` (and the Locks page's view)."""
    user = django_user_model.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(content_type__app_label="mutexcron",
                                                         content_type__model="schedule", codename__in=codenames))
    user.user_permissions.add(Permission.objects.get(content_type__model="lock", codename="view_lock"))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture(autouse=True)
def _sql_store(settings: Any, targets: list[str]) -> Iterator[None]:  # noqa: F811
    settings.MUTEXCRON = {"AUTOSTART": False}  # the default: the SQL store in the default database
    yield


# -- the list ---------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_list_shows_each_schedule_with_its_spec_in_words_kwargs_and_next_fires(admin_client: Client) -> None:
    add_schedule(timezone="Europe/Paris", by="alice")

    page = text(admin_client.get(URL))

    row = row_of(page, NAME)
    assert SEND in row and '{"to": "ops@example.com"}' in row
    assert "0 7 * * 1-5" in row and "At 07:00, Monday through Friday" in row
    assert "Europe/Paris" in row and "Enabled" in row and "by alice" in row
    assert row.count("<li>") == 3 and ("CET" in row or "CEST" in row)  # the next fires, in its zone
    assert f"{URL}{NAME}/change/" in row and f"{URL}{NAME}/delete/" in row
    assert 'value="Disable"' in row and "Allowed targets:" in page and PURGE in page


@pytest.mark.django_db
def test_the_list_shows_a_store_that_cannot_be_reached_without_its_password(admin_client: Client,
                                                                             settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": "redis://:hunter2@127.0.0.1:1/0"}

    response = admin_client.get(URL)

    assert response.status_code == 200
    assert 'id="mutexcron-store-error"' in text(response) and "hunter2" not in text(response)


@pytest.mark.django_db
def test_a_store_without_a_control_plane_is_shown_as_the_pages_error(admin_client: Client, settings: Any,
                                                                     tmp_path: Path) -> None:
    from docs.examples.minimal_store import SQLiteLockStore

    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": SQLiteLockStore(str(tmp_path / "locks.db"))}

    response = admin_client.get(URL)

    assert response.status_code == 200 and "list its locks" in text(response)
    added = admin_client.post(ADD_URL, form_data())
    assert added.status_code == 200 and "Could not save" in text(added)  # the form again, its error on top
    assert "read run-time schedule 'ops.report'" in text(added)  # the operation the store cannot do


@pytest.mark.django_db
def test_no_allowed_target_says_how_to_allow_one(admin_client: Client, targets: list[str]) -> None:  # noqa: F811
    from mutexcron import default_registry

    for name in targets:
        default_registry._targets.pop(name)

    assert "@mutexcron.callable_target()" in text(admin_client.get(URL))
    assert "@mutexcron.callable_target()" in text(admin_client.get(ADD_URL))
    assert 'id="mutexcron-add-schedule"' not in text(admin_client.get(URL))


# -- add and edit ------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_add_form_offers_the_allowed_targets_with_their_parameters(admin_client: Client) -> None:
    page = text(admin_client.get(ADD_URL))

    assert f'<option value="{SEND}">{SEND}(to: str, copies: int = 1)</option>' in page
    assert f'<option value="{PURGE}">{PURGE}(days: int)</option>' in page  # ctx is the JobContext, not a kwarg


@pytest.mark.django_db
def test_adding_stores_the_schedule_by_the_user_and_logs_it(admin_client: Client) -> None:
    response = admin_client.post(ADD_URL, form_data(timezone="Europe/Paris", lease="90", catch_up="latest"))

    assert response.status_code == 302 and response["Location"] == URL
    state = state_of()
    assert state is not None and state.schedule_by == "admin"
    assert '"target":"reports.send"' in (state.definition or "") and '"lease":90.0' in (state.definition or "")
    entry = LogEntry.objects.get(object_id=NAME)
    assert entry.action_flag == ADDITION and entry.user.get_username() == "admin"
    assert entry.get_change_message().startswith("Added: reports.send with {'to': 'ops@example.com'}")
    assert "added" in text(admin_client.get(URL)).lower()


@pytest.mark.django_db
@pytest.mark.parametrize(("fields", "field", "error"), [
    ({"kwargs": '{"to": '}, "kwargs", "Not JSON"),
    ({"kwargs": '["ops"]'}, "kwargs", "Give a JSON object"),
    ({"kwargs": '{"to": NaN}'}, "kwargs", "NaN is not JSON"),
    ({"kwargs": '{"to": "ops", "cc": "me"}'}, "kwargs", "unexpected keyword argument 'cc'"),
    ({"kwargs": "{}"}, "kwargs", "missing a required argument: 'to'"),
    ({"target": "os.system"}, "target", "Select a valid choice"),
    ({"spec": "0 7 * * 8"}, "spec", "8 is outside 0-7"),
    ({"timezone": "Mars/Olympus"}, "timezone", "unknown time zone 'Mars/Olympus'"),
    ({"name": "has space"}, "name", "contains ' '"),
    ({"lease": "0"}, "lease", "greater than or equal to 1"),
], ids=["not-json", "not-an-object", "nan", "unexpected-kwarg", "missing-kwarg", "unknown-target", "bad-spec",
        "bad-zone", "bad-name", "bad-lease"])
def test_a_bad_field_is_refused_on_that_field_and_nothing_is_stored(admin_client: Client, fields: dict[str, str],
                                                                    field: str, error: str) -> None:
    response = admin_client.post(ADD_URL, form_data(**fields))

    assert response.status_code == 200
    assert error in field_errors(text(response), field), text(response)
    assert state_of(fields.get("name", NAME)) is None


@pytest.mark.django_db
def test_adding_stores_the_run_options_of_a_declared_job(admin_client: Client) -> None:
    response = admin_client.post(ADD_URL, form_data(timeout="90", start_deadline="30", on_busy="replace",
                                                    pause_on_failure="3"))

    assert response.status_code == 302
    definition = state_of().definition or ""  # type: ignore[union-attr]
    for stored in ('"timeout":90.0', '"start_deadline":30.0', '"on_busy":"replace"', '"pause_on_failure":3'):
        assert stored in definition


@pytest.mark.django_db
def test_the_edit_page_shows_the_schedules_run_options(admin_client: Client) -> None:
    add_schedule(timeout=90, on_busy="wait", pause_on_failure=2)

    page = text(admin_client.get(f"{URL}{NAME}/change/"))

    assert 'name="timeout" value="90.0"' in page and 'name="pause_on_failure" value="2"' in page
    assert '<option value="wait" selected>' in page


@pytest.mark.django_db
@pytest.mark.parametrize(("field", "value", "error"), [
    ("timeout", "-5", "job 'ops.report': timeout must be > 0, not -5.0"),
    ("start_deadline", "0", "job 'ops.report': start_deadline must be > 0, not 0.0"),
    ("pause_on_failure", "0", "job 'ops.report': pause_on_failure must be False or a number of failed runs"),
    ("on_busy", "queue", "Select a valid choice"),
])
def test_a_bad_run_option_is_refused_on_its_field_with_mutex_cron_s_error(admin_client: Client, field: str,
                                                                         value: str, error: str) -> None:
    response = admin_client.post(ADD_URL, form_data(**{field: value}))

    assert response.status_code == 200
    assert error in field_errors(text(response), field), text(response)
    assert state_of() is None


@pytest.mark.django_db
def test_a_name_of_a_declared_job_is_refused_by_add_schedule_on_the_name(admin_client: Client,
                                                                         declare: Declarations) -> None:
    declare("0 3 * * *", name="declared.job")

    response = admin_client.post(ADD_URL, form_data(name="declared.job"))

    assert "is a job declared in code" in field_errors(text(response), "name")
    assert state_of("declared.job") is None


@pytest.mark.django_db
def test_adding_a_name_that_exists_asks_to_edit_it(admin_client: Client) -> None:
    add_schedule(spec="0 6 * * *")

    response = admin_client.post(ADD_URL, form_data())

    assert "exists: edit it instead" in field_errors(text(response), "name")
    assert '"spec":"0 6 * * *"' in (state_of().definition or "")  # type: ignore[union-attr]


@pytest.mark.django_db
def test_the_spec_is_in_words_next_to_it_on_the_edit_page_and_after_a_post(admin_client: Client) -> None:
    add_schedule()

    page = text(admin_client.get(f"{URL}{NAME}/change/"))
    posted = text(admin_client.post(ADD_URL, form_data(name="other", spec="*/20 9-17 * * *", kwargs="[]")))

    assert 'id="mutexcron-spec-description">At 07:00, Monday through Friday<' in page
    assert '"to": "ops@example.com"' in page and 'value="0 7 * * 1-5"' in page
    assert "Every 20 minutes, between 09:00 and 17:59" in posted


@pytest.mark.django_db
def test_editing_redefines_the_schedule_under_its_name(admin_client: Client) -> None:
    add_schedule()

    response = admin_client.post(f"{URL}{NAME}/change/", form_data(name="forged", spec="30 8 * * *",
                                                                   kwargs='{"to": "dev", "copies": 2}'))

    assert response.status_code == 302
    assert state_of("forged") is None
    definition = state_of().definition or ""  # type: ignore[union-attr]
    assert '"spec":"30 8 * * *"' in definition and '"copies":2' in definition
    entry = LogEntry.objects.get(object_id=NAME, action_flag=CHANGE)
    assert entry.get_change_message().startswith("Changed: reports.send with {'copies': 2, 'to': 'dev'}")


@pytest.mark.django_db
def test_editing_a_schedule_the_store_does_not_hold_goes_back_to_the_list(admin_client: Client) -> None:
    response = admin_client.get(f"{URL}nowhere/change/", follow=True)

    assert "no run-time schedule of that name" in text(response)


# -- enable, disable, delete -------------------------------------------------------------------------------


@pytest.mark.django_db
def test_disable_pauses_it_fleet_wide_by_the_user_and_enable_lifts_it(admin_client: Client) -> None:
    add_schedule()

    assert admin_client.post(DISABLE_URL, {"name": NAME}).status_code == 302

    state = state_of()
    assert state is not None and state.paused and state.paused_by == "admin" and state.paused_until is None
    row = row_of(text(admin_client.get(URL)), NAME)
    assert "Disabled" in row and 'value="Enable"' in row
    assert admin_client.post(ENABLE_URL, {"name": NAME}).status_code == 302
    assert not state_of().paused  # type: ignore[union-attr]
    assert [entry.get_change_message() for entry in LogEntry.objects.order_by("pk")] == [
        "Disabled (paused until enabled)", "Enabled"]


@pytest.mark.django_db
def test_enable_and_disable_are_posts_about_a_run_time_schedule(admin_client: Client,
                                                                 declare: Declarations) -> None:
    declare("0 3 * * *", name="declared.job")

    assert admin_client.get(DISABLE_URL, {"name": NAME}).status_code == 405
    assert admin_client.post(DISABLE_URL, {"name": "declared.job"}).status_code == 302
    assert state_of("declared.job") is None  # not paused through this page


@pytest.mark.django_db
def test_delete_asks_first_then_removes_it_and_logs_it(admin_client: Client) -> None:
    add_schedule()

    confirm = admin_client.get(f"{URL}{NAME}/delete/")

    assert confirm.status_code == 200 and "Delete the run-time schedule" in text(confirm)
    assert state_of() is not None
    assert admin_client.post(f"{URL}{NAME}/delete/").status_code == 302
    assert state_of() is None
    assert f'data-schedule="{NAME}"' not in text(admin_client.get(URL))
    entry = LogEntry.objects.get(object_id=NAME)
    assert entry.action_flag == DELETION and entry.user.get_username() == "admin"


# -- permissions -------------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_a_viewer_sees_the_list_without_controls_and_gets_403_for_each(django_user_model: Any) -> None:
    add_schedule()
    viewer = user_with(django_user_model, "viewer", "view_schedule")

    page = text(viewer.get(URL))

    row = row_of(page, NAME)
    assert 'value="Disable"' not in row and "Delete…" not in row and 'id="mutexcron-add-schedule"' not in page
    assert viewer.get(ADD_URL).status_code == 403
    assert viewer.post(ADD_URL, form_data(name="other")).status_code == 403
    assert viewer.get(f"{URL}{NAME}/change/").status_code == 403
    assert viewer.post(DISABLE_URL, {"name": NAME}).status_code == 403
    assert viewer.post(f"{URL}{NAME}/delete/").status_code == 403
    assert state_of() is not None and not state_of().paused  # type: ignore[union-attr]


@pytest.mark.django_db
def test_without_a_schedule_permission_the_page_is_403(django_user_model: Any) -> None:
    nobody = user_with(django_user_model, "nobody")

    assert nobody.get(URL).status_code == 403
    assert 'id="mutexcron-schedules-link"' not in text(nobody.get(LOCKS_URL))


@pytest.mark.django_db
def test_each_permission_allows_its_own_action_only(django_user_model: Any) -> None:
    adder = user_with(django_user_model, "adder", "add_schedule")
    changer = user_with(django_user_model, "changer", "change_schedule")
    deleter = user_with(django_user_model, "deleter", "view_schedule", "delete_schedule")

    assert adder.post(ADD_URL, form_data()).status_code == 302
    assert state_of().schedule_by == "adder"  # type: ignore[union-attr]
    assert adder.post(DISABLE_URL, {"name": NAME}).status_code == 403
    assert changer.post(ADD_URL, form_data(name="other")).status_code == 403
    assert changer.post(DISABLE_URL, {"name": NAME}).status_code == 302
    assert changer.post(f"{URL}{NAME}/change/", form_data(spec="0 9 * * *")).status_code == 302
    assert changer.post(f"{URL}{NAME}/delete/").status_code == 403
    assert deleter.post(DISABLE_URL, {"name": NAME}).status_code == 403
    assert deleter.post(f"{URL}{NAME}/delete/").status_code == 302
    assert state_of() is None


# -- on the Locks page -------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_locks_page_shows_a_run_time_schedule_as_a_job_linked_to_its_page(admin_client: Client) -> None:
    add_schedule()

    page = text(admin_client.get(LOCKS_URL))

    row = row_of(page, NAME, "data-job")
    assert "mutexcron-orphan" not in row and "Run-time schedule" in row and f"{URL}{NAME}/change/" in row
    assert "At 07:00, Monday through Friday" in row and 'value="Run now"' in row
    assert f'href="{URL}"' in page and "1 run-time schedule" in page
    assert admin_client.get(f"{LOCKS_URL}{NAME}/timeline/").status_code == 200


@pytest.mark.django_db
def test_run_now_on_the_locks_page_runs_a_run_time_schedule(admin_client: Client) -> None:
    add_schedule(kwargs={"to": "now@example.com", "copies": 3})

    response = admin_client.post(f"{LOCKS_URL}run/", {"name": NAME}, follow=True)

    assert "succeeded" in text(response)
    assert SENT == [{"to": "now@example.com", "copies": 3}]


@pytest.mark.django_db
def test_the_jobs_page_lists_the_changes_made_on_the_schedules_page(admin_client: Client) -> None:
    admin_client.post(ADD_URL, form_data())
    admin_client.post(DISABLE_URL, {"name": NAME})

    page = text(admin_client.get(f"{LOCKS_URL}{NAME}/history/"))

    assert "Added: reports.send" in page and "Disabled (paused until enabled)" in page


def test_a_spec_is_described_once_however_many_rows_show_it(monkeypatch: pytest.MonkeyPatch) -> None:
    from mutexcron_django.admin import schedules

    calls: list[str] = []
    original = schedules.get_description

    def counting(expression: str, options: Any) -> str:
        calls.append(expression)
        return original(expression, options)

    monkeypatch.setattr(schedules, "get_description", counting)
    texts = {schedules.describe("11 22 1 1 *") for _ in range(50)}  # a spec no other test describes

    assert texts == {"At 22:11, on day 1 of the month, only in January"} and len(calls) == 1

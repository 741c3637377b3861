"""The admin: the Locks page reads the live store, run now, force unlock, and the run history."""

from __future__ import annotations

import html
import re
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from mutexcron import default_registry, mutex_cron, next_fire_times
from mutexcron.stores import LockStore, store_from_url
from mutexcron_django.models import JobRun, Lock
from mutexcron_django.sql.store import DjangoLockStore
from tests.django.session_zone import session_time_zone

LOCKS_URL = "/admin/mutexcron/lock/"
RUN_URL = "/admin/mutexcron/lock/run/"
UNLOCK_URL = "/admin/mutexcron/lock/force-unlock/"
HISTORY_URL = "/admin/mutexcron/jobrun/"
OTHER = "elsewhere:4242"  # the instance that holds locks taken "by another process"

Declare = Callable[..., str]


@pytest.fixture
def declare() -> Iterator[Declare]:
    """Declare jobs into mutexcron.default_registry for this test only; they are removed afterwards."""
    declared: list[str] = []

    def declare(name: str, spec: str = "30 6 * * *", body: Callable[[], Any] | None = None, **options: Any) -> str:
        def job() -> Any:
            return body() if body is not None else None

        mutex_cron(spec, name=name, **options)(job)
        declared.append(name)
        return name

    yield declare
    for name in declared:
        default_registry.remove(name)


@pytest.fixture
def redis_store(settings: Any, redis_url: str) -> Iterator[LockStore]:
    """MUTEXCRON['STORE'] is a Redis URL of this test's own; the store object lets a test act as another process."""
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": redis_url}
    store = store_from_url(redis_url)
    yield store
    store.close()


def hold(store: LockStore, name: str, owner: str = OTHER) -> int:
    acquisition = store.acquire(name, owner=owner, lease=timedelta(minutes=5), fire_time=None)
    assert acquisition.acquired
    assert acquisition.token is not None
    return acquisition.token


def row_of(page: str, name: str) -> str:
    """The HTML of job ``name``'s row on the Locks page."""
    start = page.index(f'data-job="{name}"')
    return page[start : page.index("</tr>", start)]


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


@pytest.fixture
def staff_user(django_user_model: Any) -> Any:
    """A staff user who may view and change locks and view the history, but not force-unlock."""
    user = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="mutexcron", codename__in=["view_lock", "change_lock", "view_jobrun"]))
    return user


@pytest.fixture
def staff_client(staff_user: Any) -> Client:
    client = Client()
    client.force_login(staff_user)
    return client


# -- the Locks page ---------------------------------------------------------------------------------


@pytest.mark.django_db
def test_locks_page_lists_declared_jobs_with_spec_timezone_next_fire_and_state(admin_client: Client,
                                                                               declare: Declare) -> None:
    declare("admin.paris_digest", "30 6 * * 1-5", timezone="Europe/Paris")
    declare("admin.every_minute", "* * * * *")
    now = datetime.now(UTC)

    response = admin_client.get(LOCKS_URL)

    assert response.status_code == 200
    page = text(response)
    paris = row_of(page, "admin.paris_digest")
    assert "30 6 * * 1-5" in paris
    assert "Europe/Paris" in paris
    (fire,) = next_fire_times("30 6 * * 1-5", after=now, timezone="Europe/Paris")
    assert fire.strftime("%Y-%m-%d %H:%M:%S %Z") in paris
    assert 'data-status="unseeded"' in paris and "No lock yet" in paris
    minute = row_of(page, "admin.every_minute")
    assert "* * * * *" in minute
    assert "UTC" in minute and "(scheduler's)" in minute


@pytest.mark.django_db
def test_locks_page_shows_a_lock_held_in_the_sql_store_with_holder_and_lease(admin_client: Client,
                                                                            declare: Declare) -> None:
    declare("admin.sql_held")
    hold(DjangoLockStore(), "admin.sql_held")

    row = row_of(text(admin_client.get(LOCKS_URL)), "admin.sql_held")

    assert 'data-status="held"' in row and "Locked" in row
    assert OTHER in row
    assert "left)" in row  # the lease expiry and the time left


@pytest.mark.django_db
def test_locks_page_reads_the_live_state_of_a_redis_store(admin_client: Client, declare: Declare,
                                                         redis_store: LockStore) -> None:
    declare("admin.redis_job")
    hold(redis_store, "admin.redis_job")

    response = admin_client.get(LOCKS_URL)

    row = row_of(text(response), "admin.redis_job")
    assert 'data-status="held"' in row
    assert OTHER in row
    assert "RedisLockStore" in text(response)
    assert not Lock.objects.exists()  # nothing came from the SQL table


@pytest.mark.django_db
def test_locks_page_reads_the_live_state_of_a_mongodb_store(admin_client: Client, declare: Declare, settings: Any,
                                                           mongo_url: str) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": mongo_url}
    declare("admin.mongo_job")
    with store_from_url(mongo_url) as store:
        hold(store, "admin.mongo_job")

    row = row_of(text(admin_client.get(LOCKS_URL)), "admin.mongo_job")

    assert 'data-status="held"' in row
    assert OTHER in row


@pytest.mark.django_db
def test_locks_page_shows_a_released_lock_as_free_with_its_last_fire(admin_client: Client, declare: Declare,
                                                                    redis_store: LockStore) -> None:
    declare("admin.released")
    fire = datetime(2030, 1, 2, 6, 30, tzinfo=UTC)
    token = redis_store.acquire("admin.released", owner=OTHER, lease=timedelta(minutes=5), fire_time=fire).token
    assert token is not None
    redis_store.release("admin.released", token=token)

    row = row_of(text(admin_client.get(LOCKS_URL)), "admin.released")

    assert 'data-status="free"' in row
    assert "2030-01-02 06:30:00 UTC" in row


@pytest.mark.django_db
def test_orphan_locks_in_the_store_are_listed_and_marked(admin_client: Client, declare: Declare,
                                                        redis_store: LockStore) -> None:
    declare("admin.still_declared")
    redis_store.seed(["admin.renamed_long_ago"])

    page = text(admin_client.get(LOCKS_URL))

    orphan = row_of(page, "admin.renamed_long_ago")
    assert 'data-orphan="1"' in orphan and "Orphan" in orphan
    assert "Run now" not in orphan
    assert 'data-orphan="1"' not in row_of(page, "admin.still_declared")


@pytest.mark.django_db
def test_last_outcome_is_the_latest_run_not_the_other_instances_already_ran_echo(admin_client: Client,
                                                                                declare: Declare) -> None:
    declare("admin.history_job")
    now = timezone.now()
    common = {"job_name": "admin.history_job", "fire_time": now - timedelta(minutes=1)}
    JobRun.objects.create(**common, instance_id="a", outcome="failed", started_at=now - timedelta(seconds=50),
                          finished_at=now - timedelta(seconds=49), error="Traceback ...\nValueError: boom")
    JobRun.objects.create(**common, instance_id="b", outcome="skipped_already_ran",
                          started_at=now - timedelta(seconds=10), finished_at=now - timedelta(seconds=10))

    row = row_of(text(admin_client.get(LOCKS_URL)), "admin.history_job")

    assert "failed" in row
    assert "skipped_already_ran" not in row


@pytest.mark.django_db
def test_unreachable_store_shows_an_error_not_a_500(admin_client: Client, declare: Declare, settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": "redis://127.0.0.1:1/0"}
    declare("admin.unreachable")

    response = admin_client.get(LOCKS_URL)

    assert response.status_code == 200
    page = text(response)
    assert 'id="mutexcron-store-error"' in page
    assert "cannot be read" in page and "127.0.0.1:1" in page
    assert 'data-status="unknown"' in row_of(page, "admin.unreachable")  # the declared jobs are still listed


@pytest.mark.django_db
def test_store_password_never_appears_on_the_page_or_in_messages(admin_client: Client, declare: Declare,
                                                                 settings: Any, redis_prefix: str) -> None:
    secret = "s3cr3t-Pa55word"
    settings.MUTEXCRON = {"AUTOSTART": False, "STORE": f"redis://:{secret}@127.0.0.1:1/0?prefix={redis_prefix}"}
    declare("admin.secret_store")

    page = admin_client.get(LOCKS_URL)
    after_run = admin_client.post(RUN_URL, {"name": "admin.secret_store"}, follow=True)
    after_unlock = admin_client.post(UNLOCK_URL, {"name": "admin.secret_store"}, follow=True)

    for response in (page, after_run, after_unlock):
        assert response.status_code == 200
        assert secret not in response.content.decode()
    assert "***" in text(page)  # the store is named, masked
    assert "did not run" in text(after_run)
    assert "Could not force-unlock" in text(after_unlock)


@pytest.mark.django_db
def test_locks_page_needs_view_permission(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("nobody", password="pw", is_staff=True))

    assert client.get(LOCKS_URL).status_code == 403


@pytest.mark.django_db
def test_locks_cannot_be_added_changed_or_deleted_through_the_admin(admin_client: Client) -> None:
    Lock.objects.create(name="admin.row")

    assert admin_client.get(LOCKS_URL + "add/").status_code == 403
    assert admin_client.get(LOCKS_URL + "admin.row/change/").url == LOCKS_URL  # the live page instead
    assert admin_client.post(LOCKS_URL + "admin.row/delete/", {"post": "yes"}).status_code == 403
    assert Lock.objects.filter(name="admin.row").exists()


@pytest.mark.django_db
def test_admin_index_lists_the_app_under_its_label(admin_client: Client) -> None:
    page = text(admin_client.get("/admin/"))

    assert "/admin/mutexcron/lock/" in page
    assert "/admin/mutexcron/jobrun/" in page
    assert "/admin/mutexcron/lock/add/" not in page


# -- run now ----------------------------------------------------------------------------------------


@pytest.mark.django_db
def test_run_now_runs_the_job_and_shows_the_outcome(admin_client: Client, declare: Declare) -> None:
    calls: list[int] = []
    declare("admin.run_me", body=lambda: calls.append(1))

    response = admin_client.post(RUN_URL, {"name": "admin.run_me"}, follow=True)

    assert response.redirect_chain == [(LOCKS_URL, 302)]
    assert calls == [1]
    assert "Job “admin.run_me” ran on" in text(response) and "succeeded" in text(response)
    run = JobRun.objects.get(job_name="admin.run_me")
    assert run.outcome == "succeeded" and run.manual
    assert 'data-status="free"' in row_of(text(response), "admin.run_me")
    assert LogEntry.objects.filter(object_id="admin.run_me", change_message="Ran now: succeeded").exists()


@pytest.mark.django_db
def test_run_now_reports_a_failure_with_its_error(admin_client: Client, declare: Declare) -> None:
    def body() -> None:
        raise ValueError("the mail server said no")

    declare("admin.fails", body=body)

    response = admin_client.post(RUN_URL, {"name": "admin.fails"}, follow=True)

    assert "failed" in text(response)
    assert "ValueError: the mail server said no" in text(response)
    assert JobRun.objects.get(job_name="admin.fails").outcome == "failed"


@pytest.mark.django_db
def test_run_now_on_a_busy_lock_shows_who_holds_it(admin_client: Client, declare: Declare,
                                                   redis_store: LockStore) -> None:
    calls: list[int] = []
    declare("admin.busy", body=lambda: calls.append(1))
    hold(redis_store, "admin.busy")

    response = admin_client.post(RUN_URL, {"name": "admin.busy"}, follow=True)

    assert calls == []
    assert f"did not run: lock held by {OTHER}" in text(response)
    assert JobRun.objects.get(job_name="admin.busy").outcome == "skipped_busy"


@pytest.mark.django_db
def test_run_now_of_a_raise_policy_job_on_a_busy_lock_shows_who_holds_it(admin_client: Client, declare: Declare,
                                                                         redis_store: LockStore) -> None:
    declare("admin.busy_raise", on_busy="raise")
    hold(redis_store, "admin.busy_raise")

    response = admin_client.post(RUN_URL, {"name": "admin.busy_raise"}, follow=True)

    assert response.status_code == 200
    assert f"lock held by {OTHER}" in text(response)


@pytest.mark.django_db
def test_run_now_of_a_wait_policy_job_does_not_block_the_request_for_a_lease(admin_client: Client, declare: Declare,
                                                                            redis_store: LockStore) -> None:
    declare("admin.busy_wait", on_busy="wait", lease=timedelta(minutes=10))
    hold(redis_store, "admin.busy_wait")

    started = time.monotonic()
    response = admin_client.post(RUN_URL, {"name": "admin.busy_wait"}, follow=True)

    assert time.monotonic() - started < 5
    assert f"lock held by {OTHER}" in text(response)


@pytest.mark.django_db(transaction=True)
def test_run_now_runs_outside_the_request_transaction_under_atomic_requests(admin_client: Client, declare: Declare,
                                                                           monkeypatch: Any) -> None:
    monkeypatch.setitem(connection.settings_dict, "ATOMIC_REQUESTS", True)
    in_transaction: list[bool] = []
    declare("admin.atomic", body=lambda: in_transaction.append(connection.in_atomic_block))

    admin_client.post(RUN_URL, {"name": "admin.atomic"})

    assert in_transaction == [False]  # so the SQL lock was committed, visible to the other instances


@pytest.mark.django_db
def test_run_now_of_an_undeclared_job_says_so(admin_client: Client) -> None:
    response = admin_client.post(RUN_URL, {"name": "admin.not_declared"}, follow=True)

    assert "is not declared" in text(response)


@pytest.mark.django_db
def test_run_now_is_post_only(admin_client: Client, declare: Declare) -> None:
    calls: list[int] = []
    declare("admin.get_run", body=lambda: calls.append(1))

    assert admin_client.get(RUN_URL, {"name": "admin.get_run"}).status_code == 405
    assert calls == []


@pytest.mark.django_db
def test_run_now_needs_change_permission(client: Client, django_user_model: Any, declare: Declare) -> None:
    calls: list[int] = []
    declare("admin.view_only", body=lambda: calls.append(1))
    viewer = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron", codename="view_lock"))
    client.force_login(viewer)

    assert client.post(RUN_URL, {"name": "admin.view_only"}).status_code == 403
    assert calls == []
    assert "Run now" not in text(client.get(LOCKS_URL))


@pytest.mark.django_db
def test_run_now_rejects_a_malformed_name(admin_client: Client) -> None:
    assert admin_client.post(RUN_URL, {"name": "bad name {x}"}).status_code == 400


# -- force unlock -----------------------------------------------------------------------------------


@pytest.mark.django_db
def test_force_unlock_needs_the_force_unlock_permission(staff_client: Client, declare: Declare,
                                                        redis_store: LockStore) -> None:
    declare("admin.guarded")
    hold(redis_store, "admin.guarded")

    assert staff_client.post(UNLOCK_URL, {"name": "admin.guarded"}).status_code == 403
    assert staff_client.post(UNLOCK_URL, {"name": "admin.guarded", "confirm": "yes"}).status_code == 403
    state = redis_store.lock("admin.guarded")
    assert state is not None and state.is_held(redis_store.now())
    assert "Force unlock" not in row_of(text(staff_client.get(LOCKS_URL)), "admin.guarded")


@pytest.mark.django_db
def test_force_unlock_asks_for_confirmation_first(admin_client: Client, declare: Declare,
                                                  redis_store: LockStore) -> None:
    declare("admin.confirm_me")
    hold(redis_store, "admin.confirm_me")

    response = admin_client.post(UNLOCK_URL, {"name": "admin.confirm_me"})

    assert response.status_code == 200
    page = text(response)
    assert "Are you sure?" in page
    holder = page[page.index('id="mutexcron-unlock-holder"') :]
    assert f"It is held by <strong>{OTHER}</strong>" in holder
    assert 'name="confirm" value="yes"' in page and "csrfmiddlewaretoken" in page
    state = redis_store.lock("admin.confirm_me")
    assert state is not None and state.is_held(redis_store.now())


@pytest.mark.django_db
def test_force_unlock_on_confirm_frees_the_lock(admin_client: Client, declare: Declare,
                                                redis_store: LockStore) -> None:
    declare("admin.stuck")
    hold(redis_store, "admin.stuck")

    response = admin_client.post(UNLOCK_URL, {"name": "admin.stuck", "confirm": "yes"}, follow=True)

    assert response.redirect_chain == [(LOCKS_URL, 302)]
    state = redis_store.lock("admin.stuck")
    assert state is not None and not state.locked
    page = text(response)
    assert f"Force-unlocked “admin.stuck” (it was held by {OTHER})" in page
    assert 'data-status="free"' in row_of(page, "admin.stuck")
    assert LogEntry.objects.filter(object_id="admin.stuck", change_message__startswith="Force-unlocked").exists()


@pytest.mark.django_db
def test_force_unlock_works_for_a_staff_user_given_the_permission(staff_client: Client, staff_user: Any,
                                                                  declare: Declare) -> None:
    staff_user.user_permissions.add(Permission.objects.get(codename="force_unlock_lock"))
    declare("admin.sql_stuck")
    store = DjangoLockStore()
    hold(store, "admin.sql_stuck")

    staff_client.post(UNLOCK_URL, {"name": "admin.sql_stuck", "confirm": "yes"})

    state = store.lock("admin.sql_stuck")
    assert state is not None and not state.locked


@pytest.mark.django_db
def test_force_unlock_of_a_free_lock_changes_nothing_and_says_so(admin_client: Client, declare: Declare,
                                                                 redis_store: LockStore) -> None:
    declare("admin.already_free")
    redis_store.seed(["admin.already_free"])

    response = admin_client.post(UNLOCK_URL, {"name": "admin.already_free", "confirm": "yes"}, follow=True)

    assert "was not locked; nothing changed" in text(response)


@pytest.mark.django_db
def test_force_unlock_is_post_only(admin_client: Client) -> None:
    assert admin_client.get(UNLOCK_URL, {"name": "admin.x", "confirm": "yes"}).status_code == 405


@pytest.mark.django_db
def test_force_unlock_is_csrf_protected(admin_user: Any, declare: Declare, redis_store: LockStore) -> None:
    declare("admin.csrf")
    hold(redis_store, "admin.csrf")
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(UNLOCK_URL, {"name": "admin.csrf", "confirm": "yes"}).status_code == 403
    state = redis_store.lock("admin.csrf")
    assert state is not None and state.locked


@pytest.mark.django_db
def test_orphan_lock_can_be_force_unlocked(admin_client: Client, redis_store: LockStore) -> None:
    hold(redis_store, "admin.orphan_held")

    confirmation = text(admin_client.post(UNLOCK_URL, {"name": "admin.orphan_held"}))
    admin_client.post(UNLOCK_URL, {"name": "admin.orphan_held", "confirm": "yes"})

    assert "an orphan lock" in confirmation
    state = redis_store.lock("admin.orphan_held")
    assert state is not None and not state.locked


# -- run history ------------------------------------------------------------------------------------


def make_run(job_name: str, outcome: str, *, started_at: datetime | None = None, instance_id: str = "host-a:1",
             error: str = "") -> JobRun:
    started_at = started_at or timezone.now()
    return JobRun.objects.create(job_name=job_name, fire_time=started_at, instance_id=instance_id, outcome=outcome,
                                 started_at=started_at, finished_at=started_at + timedelta(milliseconds=1500),
                                 error=error)


def listed(response: Any) -> set[str]:
    """The JobRun primary keys in the history changelist."""
    return {str(run.pk) for run in response.context["cl"].result_list}


@pytest.mark.django_db
def test_history_lists_runs_with_their_columns(admin_client: Client) -> None:
    make_run("history.job", "succeeded", instance_id="host-z:77")

    response = admin_client.get(HISTORY_URL)

    page = text(response)
    assert response.status_code == 200
    for heading in ("Job name", "Fire time", "Instance id", "Outcome", "Started at", "Duration", "Lock lost",
                    "Manual"):
        assert heading in page
    assert "host-z:77" in page and "1.500 s" in page


@pytest.mark.django_db
def test_history_filters_by_outcome(admin_client: Client) -> None:
    failed = make_run("history.a", "failed", error="boom")
    make_run("history.a", "succeeded")

    response = admin_client.get(HISTORY_URL, {"outcome__exact": "failed"})

    assert listed(response) == {str(failed.pk)}


@pytest.mark.django_db
def test_history_filters_by_job_name(admin_client: Client) -> None:
    wanted = make_run("history.wanted", "succeeded")
    make_run("history.other", "succeeded")

    response = admin_client.get(HISTORY_URL, {"job_name__exact": "history.wanted"})

    assert listed(response) == {str(wanted.pk)}


@pytest.mark.django_db
def test_history_filters_by_start_date(admin_client: Client) -> None:
    recent = make_run("history.dated", "succeeded")
    make_run("history.dated", "succeeded", started_at=timezone.now() - timedelta(days=20))
    today = timezone.localdate()
    page = admin_client.get(HISTORY_URL).content.decode()
    (past_week_link,) = re.findall(r'<a href="(\?started_at__gte=[^"]*)">Past 7 days</a>', page)

    past_week = admin_client.get(HISTORY_URL + html.unescape(past_week_link))
    by_hierarchy = admin_client.get(HISTORY_URL, {"started_at__year": today.year, "started_at__month": today.month,
                                                  "started_at__day": today.day})

    assert listed(past_week) == {str(recent.pk)}
    assert listed(by_hierarchy) == {str(recent.pk)}


@pytest.mark.django_db
def test_history_search_finds_error_text_job_name_and_instance(admin_client: Client) -> None:
    failed = make_run("history.mailer", "failed", error="Traceback ...\nSMTPServerDisconnected: gone")
    other = make_run("history.cleanup", "succeeded", instance_id="web-7:321")

    assert listed(admin_client.get(HISTORY_URL, {"q": "SMTPServerDisconnected"})) == {str(failed.pk)}
    assert listed(admin_client.get(HISTORY_URL, {"q": "web-7"})) == {str(other.pk)}
    assert listed(admin_client.get(HISTORY_URL, {"q": "cleanup"})) == {str(other.pk)}


@pytest.mark.django_db
def test_failed_run_shows_its_traceback_in_a_pre_block(admin_client: Client, declare: Declare) -> None:
    def body() -> None:
        raise ZeroDivisionError("division by <zero>")

    declare("history.crashes", body=body)
    admin_client.post(RUN_URL, {"name": "history.crashes"})
    run = JobRun.objects.get(job_name="history.crashes")

    response = admin_client.get(reverse("admin:mutexcron_jobrun_change", args=[run.pk]))

    page = response.content.decode()
    assert response.status_code == 200
    start = page.index('<pre class="mutexcron-error"')
    block = page[start : page.index("</pre>", start)]
    assert "Traceback (most recent call last):" in block
    assert "ZeroDivisionError: division by &lt;zero&gt;" in block  # escaped, not injected
    assert block.count("\n") >= 3  # line breaks kept


@pytest.mark.django_db
def test_history_is_read_only_but_deletable(admin_client: Client) -> None:
    run = make_run("history.readonly", "succeeded")
    change_url = reverse("admin:mutexcron_jobrun_change", args=[run.pk])

    assert admin_client.get(HISTORY_URL + "add/").status_code == 403
    assert admin_client.post(change_url, {"job_name": "tampered"}).status_code == 403
    assert 'name="_save"' not in admin_client.get(change_url).content.decode()
    admin_client.post(reverse("admin:mutexcron_jobrun_delete", args=[run.pk]), {"post": "yes"})
    assert not JobRun.objects.filter(pk=run.pk).exists()


@pytest.mark.django_db
def test_history_is_visible_to_a_staff_user_with_view_permission(staff_client: Client) -> None:
    make_run("history.visible", "succeeded")

    assert staff_client.get(HISTORY_URL).status_code == 200
    assert "Run history" in text(staff_client.get(LOCKS_URL))


class HistoryOnPostgreSQL:
    """A database router: the run history lives in the ``postgres`` database, everything else in ``default``."""

    def db_for_read(self, model: type, **hints: Any) -> str | None:
        return "postgres" if model is JobRun else None

    db_for_write = db_for_read


@pytest.mark.django_db(transaction=True, databases=["default", "postgres"])
def test_history_shows_utc_times_whatever_the_postgresql_session_time_zone(admin_client: Client,
                                                                           settings: Any) -> None:
    settings.DATABASE_ROUTERS = [f"{__name__}.HistoryOnPostgreSQL"]
    started = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    with session_time_zone("postgres", "Asia/Kathmandu"):  # +05:45
        run = make_run("history.zone", "succeeded", started_at=started)
        listing = text(admin_client.get(HISTORY_URL))
        detail = text(admin_client.get(reverse("admin:mutexcron_jobrun_change", args=[run.pk])))

    assert "2031-01-02 03:04:05 UTC" in listing
    assert "2031-01-02 03:04:05 UTC" in detail and "2031-01-02 03:04:06 UTC" in detail  # started, finished
    assert "08:49:0" not in listing + detail  # not the Kathmandu wall clock read as UTC

"""Health (issue 10): ``manage.py mutexcron health [--json]``, the ``health/`` view for load balancers and
probes (details for users with ``mutexcron.view_lock`` only, one store per process, 503 and never 500), and
``check --deploy``'s mutexcron.W004, on the SQL store and on Redis."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
import redis
from django.contrib.auth.models import Permission
from django.core.checks import run_checks
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings

from mutexcron.stores import LockStore
from mutexcron_django import runtime
from mutexcron_django.conf import get_settings
from mutexcron_django.health import process_store
from tests.django.jobhelpers import Declarations
from tests.django.test_admin import redis_store  # noqa: F401  (a fixture)
from tests.support import wait_until
from tests.support.servers import PrivateRedis

HEALTH_URL = "/mutexcron/health/"
UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"
LONG = timedelta(minutes=5)


def logged_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def connections_received(server: redis.Redis) -> int:
    return int(server.info("stats")["total_connections_received"])


def health(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("mutexcron", "health", *args, stdout=out, stderr=StringIO())
    except CommandError:
        return 1, out.getvalue()
    return 0, out.getvalue()


@pytest.fixture
def store() -> Iterator[LockStore]:
    built = get_settings().build_store()
    yield built
    built.close()


def make_overdue(declare: Declarations, store: LockStore, name: str = "health.ticker") -> str:
    """A per-second job alerting at once, that no instance runs: overdue a second after its lock exists."""
    declare("* * * * * *", name=name, alert_after=timedelta(0))
    store.seed([name])
    created = store.lock(name)
    assert created is not None and created.created_at is not None
    wait_until(lambda: store.now() > created.created_at + timedelta(seconds=1.1), timeout=4,  # type: ignore[operator]
               what="a tick to pass unrun")
    return name


def make_failing(declare: Declarations, store: LockStore, name: str = "health.broken") -> str:
    declare("0 6 * * *", name=name)
    acquisition = store.acquire(name, owner="web-1", lease=LONG, fire_time=None)
    assert acquisition.token is not None
    store.release(name, token=acquisition.token, outcome="failed", error="Traceback...\nValueError: no upstream")
    return name


# -- the command ------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_health_exits_0_when_no_job_is_overdue_or_failing(declare: Declarations, store: LockStore) -> None:
    declare("0 6 * * *", name="health.daily")
    store.seed(["health.daily"])
    code, out = health()
    assert code == 0 and out.startswith("ok:")


@pytest.mark.django_db(transaction=True)
def test_health_exits_1_with_a_line_per_overdue_or_failing_job(declare: Declarations, store: LockStore) -> None:
    overdue, failing = make_overdue(declare, store), make_failing(declare, store)
    code, out = health()
    assert code == 1
    lines = out.strip().splitlines()
    assert len(lines) == 2
    assert any(f"'{overdue}' is overdue" in line for line in lines)
    assert any(f"'{failing}' is failing" in line and "ValueError: no upstream" in line for line in lines)


@pytest.mark.django_db(transaction=True)
def test_health_json_lists_each_problem_for_machines(declare: Declarations, store: LockStore) -> None:
    failing = make_failing(declare, store)
    code, out = health("--json")
    report = json.loads(out)
    assert code == 1 and report["status"] == "unhealthy" and report["store"]["ok"] is True
    assert [(p["job"], p["kind"]) for p in report["problems"]] == [(failing, "failing")]


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_health_exits_1_when_the_store_cannot_be_reached_without_the_password() -> None:
    code, out = health()
    assert code == 1 and "cannot be reached" in out and "127.0.0.1:1" in out
    assert "s3cret-pw" not in out


def test_health_judges_a_redis_store_too(declare: Declarations, redis_store: str) -> None:  # noqa: F811
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": redis_store}):
        store = get_settings().build_store()
        try:
            failing = make_failing(declare, store, "health.redis-broken")
            code, out = health()
        finally:
            store.close()
    assert code == 1 and f"'{failing}' is failing" in out


# -- the view --------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_view_answers_200_with_only_the_status_to_anonymous_callers(declare: Declarations,
                                                                         store: LockStore) -> None:
    declare("0 6 * * *", name="health.daily")
    response = Client().get(HEALTH_URL)
    assert response.status_code == 200 and response.json() == {"status": "ok"}


@pytest.mark.django_db(transaction=True)
def test_the_view_answers_503_and_hides_job_names_from_anonymous_callers(declare: Declarations,
                                                                         store: LockStore) -> None:
    failing = make_failing(declare, store)
    response = Client().get(HEALTH_URL)
    assert response.status_code == 503 and response.json() == {"status": "unhealthy"}
    assert failing not in response.content.decode() and "ValueError" not in response.content.decode()


@pytest.mark.django_db(transaction=True)
def test_the_view_shows_a_superuser_every_problem(declare: Declarations, store: LockStore,
                                                  admin_client: Client) -> None:
    failing = make_failing(declare, store)
    response = admin_client.get(HEALTH_URL)
    body = response.json()
    assert response.status_code == 503 and body["status"] == "unhealthy"
    assert body["problems"][0]["job"] == failing and "ValueError: no upstream" in body["problems"][0]["detail"]


@pytest.mark.django_db(transaction=True)
def test_the_view_shows_every_problem_to_a_user_who_may_view_the_locks(declare: Declarations, store: LockStore,
                                                                       django_user_model: Any) -> None:
    failing = make_failing(declare, store)
    viewer = django_user_model.objects.create_user("viewer", password="pw")  # not staff: the permission counts
    viewer.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron", codename="view_lock"))
    response = logged_in(viewer).get(HEALTH_URL)
    assert response.status_code == 503 and response.json()["problems"][0]["job"] == failing


@pytest.mark.django_db(transaction=True)
def test_the_view_shows_staff_without_the_view_lock_permission_only_the_status(declare: Declarations,
                                                                               store: LockStore,
                                                                               django_user_model: Any) -> None:
    make_failing(declare, store)
    staff = django_user_model.objects.create_user("operator", password="pw", is_staff=True)
    response = logged_in(staff).get(HEALTH_URL)
    assert response.status_code == 503 and response.json() == {"status": "unhealthy"}


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": UNREACHABLE})
def test_the_view_answers_503_when_the_store_cannot_be_reached() -> None:
    response = Client().get(HEALTH_URL)
    assert response.status_code == 503 and "s3cret-pw" not in response.content.decode()


@override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "nosuchscheme://:s3cret-pw@store.internal/0"})
def test_the_view_answers_503_unavailable_when_the_store_cannot_be_built(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.ERROR, logger="mutexcron.django"):
        response = Client(raise_request_exception=False).get(HEALTH_URL)
    assert response.status_code == 503 and response.json() == {"status": "unavailable"}
    assert "unknown store scheme 'nosuchscheme'" in caplog.text and "s3cret-pw" not in caplog.text


def test_fifty_requests_to_the_view_open_one_store_connection(declare: Declarations) -> None:
    declare("0 6 * * *", name="health.daily")
    with PrivateRedis() as url:  # a server of its own: its count of connections received is this test's alone
        server = redis.Redis.from_url(url)
        server.ping()
        with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": f"{url}?prefix=health:"}):
            before = connections_received(server)
            statuses = {Client().get(HEALTH_URL).status_code for _ in range(50)}
            opened = connections_received(server) - before
        server.close()
    assert statuses == {200} and opened == 1


@pytest.mark.django_db(transaction=True)
def test_the_view_reads_the_running_schedulers_store() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://"}):
        scheduler = runtime.start()
        try:
            assert process_store(get_settings()) is scheduler.store
            assert Client().get(HEALTH_URL).json() == {"status": "ok"}
        finally:
            runtime.stop()


@pytest.mark.django_db(transaction=True)
def test_the_view_refuses_post(store: LockStore) -> None:
    assert Client().post(HEALTH_URL).status_code == 405


# -- check --deploy ------------------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_an_overdue_job_is_w004_in_the_deploy_checks(declare: Declarations, store: LockStore) -> None:
    overdue = make_overdue(declare, store)
    warnings = [m for m in run_checks(include_deployment_checks=True, tags=["mutexcron"]) if m.id == "mutexcron.W004"]
    assert [w.obj for w in warnings] == [overdue] and "overdue" in warnings[0].msg


@pytest.mark.django_db(transaction=True)
def test_a_healthy_fleet_has_no_w004(declare: Declarations, store: LockStore) -> None:
    declare("0 6 * * *", name="health.daily")
    store.seed(["health.daily"])
    assert not [m for m in run_checks(include_deployment_checks=True, tags=["mutexcron"]) if m.id == "mutexcron.W004"]

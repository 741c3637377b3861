"""Delayed tasks in the Django app: MUTEXCRON["TASKS"], handler discovery (mutexcron.E003), get_task_queue(),
``manage.py mutexcron worker`` (in a real subprocess, on Redis) and the admin's Scheduled tasks page."""

from __future__ import annotations

import html
import re
import signal
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from datetime import UTC, datetime, timedelta
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission
from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client, override_settings
from django.utils import timezone

from mutexcron.tasks import TaskQueue, TaskStatus, UnknownTaskType, default_handlers, task_handler
from mutexcron.tasks.backends.redis.backend import RedisTaskBackend
from mutexcron_django import tasks as django_tasks
from mutexcron_django.conf import TasksSettings, get_settings
from mutexcron_django.discovery import autodiscover, handler_errors
from mutexcron_django.models import ScheduledTask
from mutexcron_django.tasks import DjangoHandlers, get_task_queue, reset_task_queue
from tests.django.jobhelpers import CommandProcess, wait_for
from tests.django.session_zone import session_time_zone

UNREACHABLE = "redis://:s3cret-pw@127.0.0.1:1/0"  # nothing listens on port 1: connection refused at once
TASKS_URL = "/admin/mutexcron/scheduledtask/"


@pytest.fixture(autouse=True)
def fresh_queue() -> Iterator[None]:
    """Each test builds get_task_queue() from its own settings (a settings change resets it too)."""
    reset_task_queue()
    yield
    reset_task_queue()


def tasks_settings(tasks: object) -> TasksSettings:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}):
        return get_settings().tasks


def problem(tasks: object) -> str:
    """The message of the ImproperlyConfigured that MUTEXCRON["TASKS"] = tasks raises."""
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}), \
            pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    return str(raised.value)


# -- MUTEXCRON["TASKS"] ----------------------------------------------------------------------------------


def test_the_default_task_backend_is_the_projects_database() -> None:
    assert get_settings().tasks == TasksSettings("django://", None, ("tasks",))
    assert tasks_settings({}) == TasksSettings("django://", None, ("tasks",))
    assert tasks_settings({"BACKEND": "django"}).backend == "django://"


def test_every_tasks_key_can_be_set() -> None:
    conf = tasks_settings({"BACKEND": "amqp://guest:guest@127.0.0.1:5672/", "CANCEL_STORE": "redis://127.0.0.1/9",
                           "MODULES": ["task_handlers", "jobs"]})

    assert conf == TasksSettings("amqp://guest:guest@127.0.0.1:5672/", "redis://127.0.0.1/9",
                                 ("task_handlers", "jobs"))
    assert tasks_settings({"BACKEND": "amqp://h/", "CANCEL_STORE": "django"}).cancel_store == "django://"
    assert tasks_settings({"BACKEND": "django://postgres"}).backend == "django://postgres"


def test_a_task_backend_object_is_used_as_it_is(redis_url: str) -> None:
    backend = RedisTaskBackend.from_url(redis_url)
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": backend}}):
        assert get_task_queue().backend is backend


@pytest.mark.parametrize(("value", "shown"), [
    (42, "42"),
    ("", "''"),
    ("redis", "'redis'"),
    ("postgres://user:s3cret@db.example/app", "'postgres://***@db.example/app'"),
    ("mongodb://user:s3cret@mongo.example/db", "'mongodb://***@mongo.example/db'"),
], ids=repr)
def test_a_bad_backend_names_the_key_and_the_value_without_the_password(value: object, shown: str) -> None:
    message = problem({"BACKEND": value})

    assert "MUTEXCRON['TASKS']['BACKEND']" in message and shown in message
    assert "s3cret" not in message


def test_the_rabbitmq_backend_needs_a_cancel_store() -> None:
    message = problem({"BACKEND": "amqp://guest:s3cret@127.0.0.1:5672/"})

    assert "MUTEXCRON['TASKS']['CANCEL_STORE'] is required" in message
    assert "amqp://***@127.0.0.1:5672/" in message and "s3cret" not in message


@pytest.mark.parametrize("backend", ["django", "redis://127.0.0.1:6379/9"])
def test_a_cancel_store_is_only_for_the_rabbitmq_backend(backend: str) -> None:
    message = problem({"BACKEND": backend, "CANCEL_STORE": "redis://:s3cret@127.0.0.1/9"})

    assert "MUTEXCRON['TASKS']['CANCEL_STORE'] is only for the RabbitMQ" in message
    assert "redis://***@127.0.0.1/9" in message and "s3cret" not in message


@pytest.mark.parametrize(("value", "shown"), [
    (5, "5"),
    ("", "''"),
    ("mongodb://user:s3cret@mongo.example/db", "'mongodb://***@mongo.example/db'"),
    ("memory", "'memory'"),
], ids=repr)
def test_a_bad_cancel_store_names_the_key_and_the_value_without_the_password(value: object, shown: str) -> None:
    message = problem({"BACKEND": "amqp://127.0.0.1/", "CANCEL_STORE": value})

    assert "MUTEXCRON['TASKS']['CANCEL_STORE']" in message and shown in message
    assert "s3cret" not in message


@pytest.mark.parametrize("value", ["tasks", None, ["tasks", ""], ["tasks", 3]], ids=repr)
def test_tasks_modules_must_be_a_list_of_names(value: object) -> None:
    message = problem({"MODULES": value})

    assert "MUTEXCRON['TASKS']['MODULES']" in message and repr(value) in message


def test_an_unknown_tasks_key_is_named_with_the_known_ones() -> None:
    message = problem({"BACKENDS": "django"})

    assert "'BACKENDS'" in message
    assert "known keys: ['BACKEND', 'CANCEL_STORE', 'JOB_VISIBILITY_TIMEOUT', 'MODULES', 'REQUIRE_HANDLERS']" in message


def test_get_task_queue_refuses_a_task_type_that_no_handler_of_this_process_knows(redis_url: str) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": redis_url}}), \
            pytest.raises(UnknownTaskType, match=r"'elsewhere\.only'.*REQUIRE_HANDLERS"):
        get_task_queue().schedule("elsewhere.only", 1, delay=timedelta(hours=1))


def test_require_handlers_off_schedules_task_types_whose_handlers_live_only_in_the_workers(redis_url: str) -> None:
    tasks = {"BACKEND": redis_url, "REQUIRE_HANDLERS": False}
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}):
        queue = get_task_queue()
        task_id = queue.schedule("elsewhere.only", 1, delay=timedelta(hours=1))
        assert queue.status(task_id) == TaskStatus.SCHEDULED


@pytest.mark.parametrize("value", ["no", 0, None], ids=repr)
def test_require_handlers_must_be_true_or_false(value: object) -> None:
    message = problem({"REQUIRE_HANDLERS": value})

    assert "MUTEXCRON['TASKS']['REQUIRE_HANDLERS'] must be True or False" in message and repr(value) in message


@pytest.mark.parametrize("value", ["redis://:s3cret@127.0.0.1/9", ["django"], None], ids=lambda v: type(v).__name__)
def test_tasks_not_a_dict_names_the_type_but_not_the_value(value: object) -> None:
    message = problem(value)

    assert message.startswith("MUTEXCRON['TASKS'] must be a dict") and type(value).__name__ in message
    assert "s3cret" not in message


@pytest.mark.parametrize(("tasks", "key"), [
    ({"BACKEND": "redis://:s3cret@127.0.0.1:99999/0"}, "BACKEND"),
    ({"BACKEND": "redis://:s3cret@127.0.0.1:6379/x"}, "BACKEND"),
    ({"BACKEND": "amqp://guest:s3cret@127.0.0.1:5672/", "CANCEL_STORE": "redis://:s3cret@127.0.0.1:99999/0"},
     "CANCEL_STORE"),
], ids=["port", "database", "cancel store"])
def test_a_malformed_url_is_improperly_configured_naming_the_key_without_the_password(tasks: dict[str, str],
                                                                                     key: str) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}), \
            pytest.raises(ImproperlyConfigured) as raised:
        get_task_queue()

    assert str(raised.value).startswith(f"MUTEXCRON['TASKS'][{key!r}]: ")
    assert "s3cret" not in str(raised.value) and "//***@" in str(raised.value)


def test_a_malformed_task_backend_url_stops_start_up() -> None:
    """AppConfig.ready() builds the queue once when TASKS is set (connecting to nothing)."""
    tasks = {"BACKEND": "redis://:s3cret@127.0.0.1:99999/0"}
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}), \
            pytest.raises(ImproperlyConfigured, match=r"MUTEXCRON\['TASKS'\]\['BACKEND'\]") as raised, \
            installed("handlerapp"):
        pass
    assert "s3cret" not in str(raised.value)


# -- discovery of <app>/tasks.py and mutexcron.E003 -----------------------------------------------------


@pytest.fixture
def fresh_handler_errors() -> Iterator[None]:
    saved = list(handler_errors)
    handler_errors.clear()
    yield
    handler_errors[:] = saved
    default_handlers.remove("duplicatehandlers.cleanup")  # the first of the two declarations got in


@contextmanager
def installed(app: str, **tasks: object) -> Iterator[None]:
    """Install ``tests.django.taskapps.<app>`` (with ``MUTEXCRON["TASKS"] = tasks`` if given): Django runs every
    AppConfig.ready() again, so mutexcron discovers the app's handler modules as it does at start-up. (The
    setting is changed first: override_settings installs apps before it changes the other settings.)"""
    with ExitStack() as stack:
        if tasks:
            stack.enter_context(override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": tasks}))
        stack.enter_context(override_settings(
            INSTALLED_APPS=[*settings.INSTALLED_APPS, f"tests.django.taskapps.{app}"]))
        yield


def mutexcron_messages() -> list:  # type: ignore[type-arg]
    return run_checks(tags=["mutexcron"], databases=[])


def test_handlers_in_an_apps_tasks_module_are_registered_at_start_up() -> None:
    with installed("handlerapp"):
        assert "handlerapp.echo" in default_handlers and "handlerapp.slow" in default_handlers
        assert mutexcron_messages() == []


def test_the_handler_modules_are_configurable() -> None:
    with installed("handlerapp", MODULES=["task_handlers"]):
        assert "handlerapp.other_module" in default_handlers
        found = autodiscover((), get_settings().tasks.modules)

    assert "tests.django.taskapps.handlerapp.task_handlers" in found
    assert "tests.django.taskapps.handlerapp.tasks" not in found


def test_a_module_named_for_jobs_and_for_handlers_is_imported_once() -> None:
    with installed("handlerapp"):
        found = autodiscover(("tasks",), ("tasks",))

    assert found.count("tests.django.taskapps.handlerapp.tasks") == 1


def test_the_apps_own_tasks_module_registers_the_django_tasks_handler_on_django_6_only() -> None:
    assert (django_tasks.TASK_TYPE in default_handlers) is django_tasks.HAS_DJANGO_TASKS
    assert "mutexcron_django.tasks" in autodiscover((), ("tasks",))


@pytest.mark.usefixtures("fresh_handler_errors")
def test_an_invalid_handler_declaration_is_e003_naming_module_and_type() -> None:
    with installed("badhandlers"):
        (error,) = mutexcron_messages()

    assert error.id == "mutexcron.E003"
    assert error.obj == "tests.django.taskapps.badhandlers.tasks"
    assert error.msg.startswith("tests.django.taskapps.badhandlers.tasks: ")
    assert "'bad handlers.send sms'" in error.msg
    assert "@task_handler" in error.hint


@pytest.mark.usefixtures("fresh_handler_errors")
def test_two_handlers_for_one_task_type_is_e003_naming_both_functions() -> None:
    with installed("duplicatehandlers"):
        (error,) = mutexcron_messages()

    assert error.id == "mutexcron.E003"
    assert "'duplicatehandlers.cleanup' has two handlers" in error.msg
    assert "tasks.cleanup " in error.msg and "tasks.cleanup_again " in error.msg
    assert "another task type" in error.hint


@pytest.mark.usefixtures("fresh_handler_errors")
def test_a_handler_declaration_error_is_reported_once_however_often_the_apps_start() -> None:
    with installed("badhandlers"), installed("handlerapp"):  # the apps start again, badhandlers still there
        assert len(mutexcron_messages()) == 1


# -- get_task_queue() -------------------------------------------------------------------------------------


def test_get_task_queue_is_built_from_the_setting_once_per_process(redis_url: str, redis_prefix: str) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": redis_url}}):
        queue = get_task_queue()
        assert isinstance(queue.backend, RedisTaskBackend) and queue.backend.prefix == redis_prefix
        assert get_task_queue() is queue
        assert isinstance(queue.handlers, DjangoHandlers)
    assert get_task_queue() is not queue  # the setting changed back


def test_get_task_queue_defaults_to_the_database_backend() -> None:
    from mutexcron_django.sql.tasks.backend import DjangoTaskBackend

    queue = get_task_queue()

    assert isinstance(queue.backend, DjangoTaskBackend) and queue.backend.using == "default"
    assert queue.handlers.fresh_connections is False  # that backend's workers close stale connections themselves


def test_the_process_queue_runs_handlers_between_close_old_connections(redis_url: str,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    import django.db

    calls: list[str] = []
    monkeypatch.setattr(django.db, "close_old_connections", lambda **_: calls.append("close"))
    task_handler("tests.integration.fresh", registry=None)(lambda payload: calls.append(f"run {payload}"))
    try:
        with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": redis_url}}):
            get_task_queue().handlers.get("tests.integration.fresh").func(7)
    finally:
        default_handlers.remove("tests.integration.fresh")

    assert calls == ["close", "run 7", "close"]


def test_a_worker_of_the_process_queue_runs_scheduled_tasks(redis_url: str) -> None:
    seen: list[Any] = []
    task_handler("tests.integration.inprocess")(lambda payload: seen.append(payload))
    try:
        with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": redis_url}}):
            queue = get_task_queue()
            task_id = queue.schedule("tests.integration.inprocess", {"n": 1})
            queue.start(["tests.integration.inprocess"])
            wait_for(lambda: seen, what="the task to run")
            wait_for(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="the task to succeed")
    finally:
        default_handlers.remove("tests.integration.inprocess")

    assert seen == [{"n": 1}]


# -- manage.py mutexcron worker: arguments (in this process) ------------------------------------------------


@pytest.fixture
def known_handler() -> Iterator[str]:
    task_handler("tests.worker.known")(lambda payload: None)
    yield "tests.worker.known"
    default_handlers.remove("tests.worker.known")


def test_worker_of_an_unknown_type_lists_the_registered_ones(known_handler: str) -> None:
    with pytest.raises(CommandError, match=r"unknown task type\(s\) nope; registered: .*tests\.worker\.known"):
        call_command("mutexcron", "worker", "--types", f"{known_handler},nope", stdout=StringIO())


def test_worker_without_any_handler_says_where_it_looked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(default_handlers, "_handlers", {})

    with pytest.raises(CommandError, match=r"no task handlers are registered .*modules: tasks"):
        call_command("mutexcron", "worker", stdout=StringIO())


@pytest.mark.parametrize(("args", "message"), [
    (["--prefetch", "0"], "must be at least 1"),
    (["--prefetch", "many"], "is not a whole number"),
    (["--types", ","], "names no task type"),
])
def test_worker_rejects_bad_arguments(args: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("mutexcron", "worker", *args, stdout=StringIO())


def test_worker_with_a_bad_tasks_setting_is_a_command_error() -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "TASKS": {"BACKEND": "redis://:s3cret@h:99999/0"}}), \
            pytest.raises(CommandError, match=r"MUTEXCRON\['TASKS'\]\['BACKEND'\]") as raised:
        call_command("mutexcron", "worker", stdout=StringIO())

    assert "s3cret" not in str(raised.value)


# -- manage.py mutexcron worker: a real process, stopped by a signal ----------------------------------------


class WorkerProcess(CommandProcess):
    """``python -m django mutexcron worker`` with tests/django/task_settings.py on a backend of the test's own."""

    def __init__(self, tmp_path: Path, backend: str, **env: str) -> None:
        output = tmp_path / "tasks.out"
        super().__init__(tmp_path, "tests.django.task_settings", output, {
            "MUTEXCRON_TEST_TASKS_BACKEND": backend, "MUTEXCRON_TEST_TASKS_DB": str(tmp_path / "worker.sqlite3"),
            "MUTEXCRON_TEST_TASKS_OUTPUT": str(output), **env,
        })

    def start(self, *args: str) -> None:
        self.launch("worker", *args)

    def started(self) -> bool:
        return "mutexcron task worker " in self.stdout


@pytest.fixture
def producer(redis_url: str) -> Iterator[TaskQueue]:
    """The test's side of the queue: schedules tasks for the worker process and reads their status."""
    queue = TaskQueue(redis_url)
    yield queue
    queue.close()


@pytest.fixture
def worker_process(tmp_path: Path, redis_url: str) -> Iterator[WorkerProcess]:
    process = WorkerProcess(tmp_path, redis_url)
    yield process
    process.kill()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_worker_runs_scheduled_tasks_until_a_signal_then_finishes_the_running_one_and_exits_0(
    worker_process: WorkerProcess, producer: TaskQueue, redis_prefix: str, signum: int
) -> None:
    worker_process.start()
    wait_for(worker_process.started, what="the worker's start-up line")
    echo = producer.schedule("handlerapp.echo", {"n": 1})
    wait_for(lambda: "echo {'n': 1}" in worker_process.lines(), what="the echo task to run")
    wait_for(lambda: producer.status(echo) == TaskStatus.SUCCEEDED, what="the echo task to succeed")

    slow = producer.schedule("handlerapp.slow", "s")
    wait_for(lambda: "slow-start s" in worker_process.lines(), what="the slow task to start")
    assert worker_process.stop(signum) == 0, worker_process.stderr

    assert worker_process.lines()[-1] == "slow-end s"  # the running task was finished, not cut short
    assert producer.status(slow) == TaskStatus.SUCCEEDED
    first_line = worker_process.stdout.splitlines()[0]
    match = re.fullmatch(r"mutexcron task worker (\S+:\d+) running (.+) on (<RedisTaskBackend .*>) "
                         r"\(prefetch 10\); stop with SIGTERM or Ctrl-C", first_line)
    assert match, first_line
    assert worker_process.process is not None and match[1].endswith(f":{worker_process.process.pid}")
    assert {"handlerapp.echo", "handlerapp.slow"} <= set(match[2].split(", "))
    assert match[3] == f"<RedisTaskBackend redis://127.0.0.1:6379/9 prefix={redis_prefix!r}>"
    assert f"{signal.Signals(signum).name} received; stopping task worker {match[1]}" in worker_process.stdout
    assert worker_process.stdout.rstrip().endswith(f"mutexcron: task worker {match[1]} stopped")
    assert "Traceback" not in worker_process.stderr


def test_worker_runs_only_the_types_it_is_given(worker_process: WorkerProcess, producer: TaskQueue) -> None:
    worker_process.start("--types", "handlerapp.echo", "--prefetch", "1")
    wait_for(worker_process.started, what="the worker's start-up line")
    slow = producer.schedule("handlerapp.slow", "not mine")
    producer.schedule("handlerapp.echo", "mine")
    wait_for(lambda: "echo mine" in worker_process.lines(), what="the echo task to run")

    assert worker_process.stop(signal.SIGTERM) == 0, worker_process.stderr
    assert "running handlerapp.echo on <RedisTaskBackend" in worker_process.stdout
    assert "(prefetch 1)" in worker_process.stdout
    assert producer.status(slow) == TaskStatus.SCHEDULED
    assert worker_process.lines() == ["echo mine"]


def test_worker_logs_to_stderr_when_the_project_has_no_logging_config(worker_process: WorkerProcess,
                                                                     producer: TaskQueue) -> None:
    worker_process.start("--types", "handlerapp.echo")
    wait_for(worker_process.started, what="the worker's start-up line")
    producer.schedule("handlerapp.echo", "logged")
    wait_for(lambda: "echo logged" in worker_process.lines(), what="the task to run")

    assert worker_process.stop(signal.SIGTERM) == 0
    assert "INFO mutexcron.tasks: task worker" in worker_process.stderr


def test_a_bad_handler_declaration_stops_the_worker_with_e003(tmp_path: Path, redis_url: str) -> None:
    worker = WorkerProcess(tmp_path, redis_url, MUTEXCRON_TEST_TASKS_APPS="tests.django.taskapps.badhandlers")
    try:
        worker.start()
        assert worker.process is not None
        assert worker.process.wait(timeout=60) == 1
    finally:
        worker.kill()
    assert "SystemCheckError" in worker.stderr
    assert "(mutexcron.E003) tests.django.taskapps.badhandlers.tasks: " in worker.stderr
    assert not worker.started()


def test_worker_on_an_unreachable_backend_waits_for_it_with_one_line_without_the_password(tmp_path: Path) -> None:
    """As the scheduler does: the store's outage is logged once, the worker keeps trying, and a signal stops it."""
    worker = WorkerProcess(tmp_path, UNREACHABLE)
    try:
        worker.start("--types", "handlerapp.echo")
        assert worker.process is not None
        wait_for(lambda: "task store unreachable" in worker.stderr, timeout=30, what="the outage to be logged")
        assert worker.process.poll() is None, worker.stderr  # still there, trying again
        assert worker.stop(signal.SIGTERM) == 0, worker.stderr
    finally:
        worker.kill()
    assert "on <RedisTaskBackend redis://***@127.0.0.1:1/0" in worker.stdout
    assert worker.stderr.count("task store unreachable") == 1, worker.stderr
    assert "Traceback" not in worker.stderr and "s3cret-pw" not in worker.stdout + worker.stderr


# -- the admin's Scheduled tasks page (the django:// backend) ------------------------------------------------


def text(response: Any) -> str:
    return html.unescape(response.content.decode())


def make_task(status: str = "scheduled", *, task_type: str = "admin.task", error: str | None = None,
              payload: str = '{"n": 1}') -> ScheduledTask:
    now = timezone.now()
    finished = now if status in ("succeeded", "failed", "cancelled") else None
    return ScheduledTask.objects.create(
        id=uuid.uuid4().hex, task_type=task_type, payload=payload, run_at=now, due=now, status=status,
        attempts=0 if status == "scheduled" else 1, error=error, created_at=now, updated_at=now,
        started_at=None if status == "scheduled" else now, finished_at=finished,
        claimed_by="worker-1:42" if status == "running" else None,
    )


def act(client: Client, action: str, *tasks: ScheduledTask) -> Any:
    return client.post(TASKS_URL, {"action": action, "_selected_action": [task.id for task in tasks],
                                   "index": 0, "select_across": 0}, follow=True)


def status_of(task: ScheduledTask) -> str:
    return ScheduledTask.objects.get(pk=task.pk).status


def listed(response: Any) -> set[str]:
    return set(re.findall(r'name="_selected_action" value="([0-9a-f]{32})"', response.content.decode()))


@pytest.fixture
def viewer(django_user_model: Any) -> Any:
    user = django_user_model.objects.create_user("task-viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron",
                                                     codename="view_scheduledtask"))
    return user


@pytest.mark.django_db
def test_tasks_page_lists_tasks_with_filters_by_status_and_type_and_search_by_id(admin_client: Client) -> None:
    # admin.* tasks have no handler here (the admin shows them whoever runs them): require_handler=False
    scheduled_id = get_task_queue().schedule("admin.sms", {"to": "+33"}, delay=timedelta(hours=1),
                                             require_handler=False)
    failed = make_task("failed", task_type="admin.mail", error="Traceback …\nValueError: no such mailbox")
    running = make_task("running", task_type="admin.mail")

    page = admin_client.get(TASKS_URL)
    assert listed(page) == {scheduled_id, failed.id, running.id}
    assert "ValueError: no such mailbox" in text(page) and "worker-1:42" in text(page)
    assert listed(admin_client.get(TASKS_URL, {"status__exact": "failed"})) == {failed.id}
    assert listed(admin_client.get(TASKS_URL, {"task_type__exact": "admin.mail"})) == {failed.id, running.id}
    assert listed(admin_client.get(TASKS_URL, {"q": scheduled_id})) == {scheduled_id}
    assert listed(admin_client.get(TASKS_URL, {"q": "admin.sms"})) == {scheduled_id}


@pytest.mark.django_db
def test_task_detail_shows_its_payload_and_traceback(admin_client: Client) -> None:
    task = make_task("failed", error="Traceback (most recent call last):\n  <boom>\nKeyError: 'x'",
                     payload='{"to": "<b>you</b>"}')

    page = admin_client.get(f"{TASKS_URL}{task.id}/change/")

    assert page.status_code == 200
    body = page.content.decode()
    assert '&quot;to&quot;: &quot;&lt;b&gt;you&lt;/b&gt;&quot;' in body  # escaped, pretty-printed JSON
    assert '<pre class="mutexcron-error"' in body and "KeyError: &#x27;x&#x27;" in body
    assert 'name="_save"' not in body  # read-only


@pytest.mark.django_db
def test_cancel_action_cancels_scheduled_tasks_and_reports_the_others(admin_client: Client) -> None:
    scheduled = ScheduledTask.objects.get(pk=get_task_queue().schedule("admin.sms", 1, delay=timedelta(hours=1),
                                                                       require_handler=False))
    failed = make_task("failed", error="boom")

    page = text(act(admin_client, "cancel_tasks", scheduled, failed))

    assert status_of(scheduled) == "cancelled" and status_of(failed) == "failed"
    assert f"Cancelled 1 task(s): {scheduled.id}." in page
    assert ("1 task(s) not cancelled (only a scheduled task that has not started can be cancelled): "
            f"{failed.id}.") in page
    entry = LogEntry.objects.get(object_id=scheduled.id)
    assert entry.change_message == "Cancelled from the admin"


@pytest.mark.django_db
def test_retry_action_schedules_failed_tasks_again_now(admin_client: Client) -> None:
    failed = make_task("failed", error="boom")
    done = make_task("succeeded")

    page = text(act(admin_client, "retry_tasks", failed, done))

    row = ScheduledTask.objects.get(pk=failed.pk)
    assert (row.status, row.attempts) == ("scheduled", 0)
    assert row.due <= timezone.now()
    assert status_of(done) == "succeeded"
    assert f"Retried 1 task(s): {failed.id}." in page
    assert f"1 task(s) not retried (only a failed task can be retried): {done.id}." in page


@pytest.mark.django_db
def test_task_actions_are_csrf_protected(admin_user: Any) -> None:
    task = make_task()
    client = Client(enforce_csrf_checks=True)
    client.force_login(admin_user)

    assert client.post(TASKS_URL, {"action": "cancel_tasks", "_selected_action": [task.id]}).status_code == 403
    assert status_of(task) == "scheduled"


@pytest.mark.django_db
def test_task_actions_need_the_change_permission(client: Client, viewer: Any) -> None:
    task = make_task()
    client.force_login(viewer)

    page = client.get(TASKS_URL)
    assert page.status_code == 200 and task.id in text(page)
    assert "cancel_tasks" not in text(page)
    act(client, "cancel_tasks", task)
    assert status_of(task) == "scheduled"


@pytest.mark.django_db
def test_a_staff_user_with_the_change_permission_can_cancel(client: Client, viewer: Any) -> None:
    viewer.user_permissions.add(Permission.objects.get(content_type__app_label="mutexcron",
                                                       codename="change_scheduledtask"))
    task = make_task()
    client.force_login(viewer)

    assert "Cancelled 1 task(s)" in text(act(client, "cancel_tasks", task))
    assert status_of(task) == "cancelled"


@pytest.mark.django_db
def test_tasks_page_needs_view_permission(client: Client, django_user_model: Any) -> None:
    client.force_login(django_user_model.objects.create_user("nobody", password="pw", is_staff=True))

    assert client.get(TASKS_URL).status_code == 403


@pytest.mark.django_db
def test_tasks_cannot_be_added_edited_or_deleted_through_the_admin(admin_client: Client) -> None:
    task = make_task()

    assert admin_client.get(TASKS_URL + "add/").status_code == 403
    assert admin_client.post(f"{TASKS_URL}{task.id}/change/", {"status": "succeeded"}).status_code == 403
    assert admin_client.post(f"{TASKS_URL}{task.id}/delete/", {"post": "yes"}).status_code == 403
    assert "delete_selected" not in text(admin_client.get(TASKS_URL))
    assert status_of(task) == "scheduled"


@pytest.mark.django_db
def test_with_another_backend_the_page_is_read_only_and_names_the_queue_without_its_password(
    admin_client: Client, settings: Any
) -> None:
    task = make_task()
    settings.MUTEXCRON = {"AUTOSTART": False, "TASKS": {"BACKEND": "redis://:s3cret@127.0.0.1:6379/9?prefix=x:"}}

    page = text(admin_client.get(TASKS_URL))

    assert "Read only: the task queue is redis://***@127.0.0.1:6379/9?prefix=x:" in page
    assert task.id in page
    assert "cancel_tasks" not in page and "s3cret" not in page
    act(admin_client, "cancel_tasks", task)
    assert status_of(task) == "scheduled"



@pytest.mark.django_db(transaction=True, databases=["default", "postgres"])
def test_tasks_page_shows_utc_times_whatever_the_postgresql_session_time_zone(admin_client: Client,
                                                                               settings: Any) -> None:
    settings.MUTEXCRON = {"AUTOSTART": False, "TASKS": {"BACKEND": "django://postgres"}}
    run_at = datetime(2031, 1, 2, 3, 4, 5, tzinfo=UTC)
    with session_time_zone("postgres", "Asia/Kathmandu"):  # +05:45
        task_id = get_task_queue().schedule("admin.sms", 1, run_at=run_at, require_handler=False)
        listing = text(admin_client.get(TASKS_URL))
        detail = text(admin_client.get(f"{TASKS_URL}{task_id}/change/"))

    assert task_id in listing and "2031-01-02 03:04:05 UTC" in listing
    assert detail.count("2031-01-02 03:04:05 UTC") == 2  # scheduled for, due
    assert "08:49:05" not in listing + detail  # not the Kathmandu wall clock read as UTC

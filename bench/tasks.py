#!/usr/bin/env python
"""Delayed one-off tasks: schedule throughput, dispatch throughput and lateness, against arq, rq-scheduler,
procrastinate and django-tasks.

A benchmark report, not a test. For each mutexcron task backend (Redis; RabbitMQ with a Redis cancel
store; ``django://`` on PostgreSQL when mutexcron_django's task backend can be imported), for arq and
rq-scheduler on the same Redis server (databases of their own), and for the PostgreSQL peers procrastinate
and django-tasks' database backend (django-tasks-db), each in a PostgreSQL database of its own:

1. schedule throughput: N tasks due at spread-out times 1 to 2 hours ahead, scheduled in one
   ``TaskQueue.schedule_many`` call (arq: ``enqueue_job(..., _defer_until=…)`` one by one; rq-scheduler:
   ``Scheduler.enqueue_at`` one by one; procrastinate: ``configure(schedule_at=…).defer`` one by one, its
   ``batch_defer`` takes one schedule_at for all; django-tasks: ``using(run_after=…).enqueue`` one by one;
   they have no batch call for different due times), in tasks/s;
2. dispatch throughput of one worker: N tasks already due are scheduled with no worker running, then one
   worker process starts and runs them with a no-op handler (rq-scheduler: its scheduler process moves
   them to the rq queue meanwhile). tasks/s from the handler start times, the first 5 % left out as the
   worker's own warm-up;
3. due-to-start lateness: with warm, idle workers, tasks are scheduled due at random times a few seconds
   ahead; each handler records ``time.time()`` at its start minus the task's due time (one machine, one
   clock). p50, p99, max, and how many started early.

Every handler does the same thing: it appends "start due" to a log file of its worker (one ``os.write``),
which is how the start times reach this process. arq and rq-scheduler run twice: with their default
settings (their poll interval is read from their own signatures and printed) and tuned (a short poll).

After an untimed warm-up round of each system, the systems take turns round by round (interleaved,
several rounds, medians) in the schedule and dispatch phases, and the mutexcron systems in their lateness
rounds, which run with nothing else of the benchmark running. The lateness of the other systems (arq,
rq-scheduler, procrastinate, django-tasks) is measured afterwards, once, all at the same time, over one default
rq-scheduler interval (60 s).

    python bench/tasks.py [--rounds R] [--schedule N] [--dispatch N] [--lateness N] [--window S]
                          [--skip SYSTEM] [--phase PHASE] [--redis URL] [--amqp URL] [--postgres URL] [--json]

The exit status is 0 whatever the figures. Everything created is removed afterwards: Redis keys under a
unique prefix (mutexcron) or under ``arq:`` / ``rq:`` in databases that held none before the run, the
RabbitMQ queues and exchanges of a unique prefix, and a PostgreSQL database made for the run.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import math
import multiprocessing
import os
import platform
import random
import signal
import statistics
import sys
import tempfile
import threading
import time
import traceback
import uuid
from collections.abc import Callable, Sequence
from contextlib import suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # an uninstalled mutexcron

TARGET_DISPATCH_RATIO = 2.0  # mutexcron Redis dispatch >= 2x the best of arq and rq-scheduler (default settings)
TARGET_P99_MS = {"mutexcron-redis": 20.0, "mutexcron-rabbitmq": 50.0}

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/11"
DEFAULT_ARQ_URL = "redis://127.0.0.1:6379/12"
DEFAULT_RQ_URL = "redis://127.0.0.1:6379/13"
DEFAULT_RQ_TUNED_URL = "redis://127.0.0.1:6379/14"
DEFAULT_AMQP_URL = "amqp://guest:guest@127.0.0.1:5672/"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

TASK_TYPE = "bench-noop"
LINE = 38  # bytes per handler log line: b"%18.6f %18.6f\n"
SKIP_FRACTION = 0.05  # of a dispatch round's first handler starts: the fresh worker's warm-up
WARMUP_TASKS = 100
LEAD_SECONDS = 1.0  # lateness: the first task is due this long after scheduling starts
ARQ_TUNED_POLL = 0.01
RQ_TUNED_INTERVAL = 1.0

# Tasks per round (schedule, dispatch) by system; --schedule / --dispatch set one size for all.
SCHEDULE_SIZES = {"mutexcron-redis": 20000, "mutexcron-rabbitmq": 1500, "mutexcron-django": 2000,
                  "arq": 2000, "rq-scheduler": 2000, "procrastinate": 1000, "djtasks": 1000}
DISPATCH_SIZES = {"mutexcron-redis": 10000, "mutexcron-rabbitmq": 1500, "mutexcron-django": 1000,
                  "arq-default": 500, "arq-tuned": 1500, "rq-default": 150, "rq-tuned": 600,
                  "procrastinate": 500, "djtasks": 300}


class BenchError(RuntimeError):
    """A phase did not complete (a worker died, tasks did not all run in time)."""


# -- what every handler does ---------------------------------------------------------------------------------

_LOG_FD: int | None = None  # set in each worker process


def _record(due: float) -> None:
    """The no-op handler's one action: append "start due" (epoch seconds) to this worker's log."""
    os.write(_LOG_FD, b"%18.6f %18.6f\n" % (time.time(), due))  # type: ignore[arg-type]


def mutexcron_handler(payload: float) -> None:
    _record(payload)


async def arq_job(ctx: dict[str, Any], due: float) -> None:
    _record(due)


def rq_job(due: float) -> None:
    _record(due)


def procrastinate_job(due: float) -> None:
    _record(due)


def djtasks_job(due: float) -> None:
    """django-tasks' handler; configure_django() replaces it with its Task (the worker imports it by this name)."""
    _record(due)


# -- worker processes ----------------------------------------------------------------------------------------


def _child(log_path: str, target: Callable[..., None], args: tuple[Any, ...]) -> None:
    global _LOG_FD
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle: it stops us
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (see main)
    _LOG_FD = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    target(*args)


def _mutexcron_worker(url: str, cancel_store: str | None, prefetch: int) -> None:
    """One TaskQueue worker (in a thread of its own); SIGTERM stops it."""
    from mutexcron.tasks import HandlerRegistry, TaskQueue, task_handler

    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})  # taken by sigtimedwait below, in every thread
    registry = HandlerRegistry()
    task_handler(TASK_TYPE, registry=registry)(mutexcron_handler)
    queue = TaskQueue(url, cancel_store=cancel_store, handlers=registry)
    failed: list[BaseException] = []

    def run() -> None:
        try:
            queue.run_worker([TASK_TYPE], prefetch=prefetch)
        except BaseException as error:
            failed.append(error)
            traceback.print_exc()

    thread = threading.Thread(target=run, name="bench-worker", daemon=True)
    thread.start()
    while thread.is_alive():
        if signal.sigtimedwait([signal.SIGTERM], 0.5) is not None:
            break
    queue.stop()  # sets its stop event and wakes the waiting worker
    thread.join(10)
    queue.close()  # then the backend's connections
    if failed:
        os._exit(1)


def _arq_worker(url: str, queue_name: str, poll_delay: float | None) -> None:
    from arq.worker import Worker, func

    asyncio.set_event_loop(asyncio.new_event_loop())
    options: dict[str, Any] = {} if poll_delay is None else {"poll_delay": poll_delay}
    worker = Worker([func(arq_job, name="bench_noop")], redis_settings=_arq_settings(url), queue_name=queue_name,
                    **options)
    worker.run()  # SIGTERM: arq's own handler stops it


def _rq_worker(url: str, queue_name: str, simple: bool) -> None:
    import redis
    from rq import Queue, SimpleWorker, Worker

    connection = redis.Redis.from_url(url)
    worker_class = SimpleWorker if simple else Worker
    worker_class([Queue(queue_name, connection=connection)], connection=connection).work(logging_level="WARNING")


def _rq_scheduler(url: str, queue_name: str, interval: float | None) -> None:
    import redis
    from rq_scheduler import Scheduler

    options: dict[str, Any] = {} if interval is None else {"interval": interval}
    Scheduler(queue_name=queue_name, connection=redis.Redis.from_url(url), **options).run()


def _procrastinate_app(conninfo: str) -> Any:
    import logging

    import procrastinate

    logging.getLogger("procrastinate").setLevel(logging.ERROR)  # not its "App is instantiated in __main__" warning
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    app.task(name="bench_noop")(procrastinate_job)
    return app


def _procrastinate_worker(conninfo: str) -> None:
    _procrastinate_app(conninfo).run_worker(queues=["default"], wait=True)  # SIGTERM: its own handler stops it


def _djtasks_worker() -> None:
    from django.core.management import call_command

    call_command("db_worker", verbosity=0)  # the backend "default" (TASKS), its default interval; SIGTERM stops it


class Workers:
    """The processes of one worker (a worker, plus rq-scheduler's scheduler), forked, logging to one file."""

    def __init__(self, targets: list[tuple[Callable[..., None], tuple[Any, ...]]], log_path: str) -> None:
        self.log_path = log_path
        Path(log_path).touch()
        context = multiprocessing.get_context("fork")
        self.processes = [context.Process(target=_child, args=(log_path, target, args), daemon=True)
                          for target, args in targets]
        for process in self.processes:
            process.start()

    def count(self) -> int:
        return os.path.getsize(self.log_path) // LINE

    def wait_for(self, n: int, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while self.count() < n:
            dead = [p for p in self.processes if not p.is_alive()]
            if dead:
                raise BenchError(f"{what}: a worker process exited (code {dead[0].exitcode}) after "
                                 f"{self.count()} of {n} tasks")
            if time.monotonic() > deadline:
                raise BenchError(f"{what}: only {self.count()} of {n} tasks ran within {timeout:.0f} s")
            time.sleep(0.02)

    def read(self) -> list[tuple[float, float]]:
        with open(self.log_path, "rb") as log:
            return [(float(line[:18]), float(line[19:37])) for line in iter(lambda: log.read(LINE), b"")]

    def stop(self) -> None:
        for process in self.processes:
            if process.is_alive():
                with suppress(ProcessLookupError):
                    os.kill(process.pid, signal.SIGTERM)  # type: ignore[arg-type]
        for process in self.processes:
            process.join(10)
            if process.is_alive():
                process.kill()
                process.join(5)


# -- the systems ---------------------------------------------------------------------------------------------


def _with_query(url: str, **options: str) -> str:
    parts = urlsplit(url)
    query = parse_qsl(parts.query, keep_blank_values=True) + list(options.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


def _where(url: str) -> str:
    parts = urlsplit(url)
    where = (parts.hostname or "?") + (f":{parts.port}" if parts.port else "")
    return where + (parts.path if parts.path not in ("", "/") else "")


def _redis_client(url: str) -> Any:
    import redis

    return redis.Redis.from_url(url, socket_connect_timeout=2, socket_timeout=30)


def _delete_matching(client: Any, pattern: str) -> int:
    deleted = 0
    batch: list[bytes] = []
    for key in client.scan_iter(match=pattern, count=1000):
        batch.append(key)
        if len(batch) >= 1000:
            deleted += client.delete(*batch)
            batch = []
    if batch:
        deleted += client.delete(*batch)
    return deleted


def _arq_settings(url: str) -> Any:
    from arq.connections import RedisSettings

    parts = urlsplit(url)
    return RedisSettings(host=parts.hostname or "127.0.0.1", port=parts.port or 6379,
                         database=int(parts.path.strip("/") or 0), password=parts.password)


def _default_of(function: Callable[..., Any], parameter: str) -> Any:
    return inspect.signature(function).parameters[parameter].default


@dataclass
class System:
    """One thing being measured: how to schedule its tasks, run its worker, and remove what it made."""

    key: str
    label: str
    settings: str = ""
    poll: str = "none: woken when due"  # the configured poll interval
    server: str = ""
    schedule_call: str = ""

    def django_settings(self, settings: dict[str, Any]) -> None:
        """Add what this system needs to the one Django configuration of the run (its database, its apps)."""

    def open(self) -> None:
        """Connect, check, and say which server (raises to skip the system)."""

    def schedule(self, dues: Sequence[float]) -> None:
        """Schedule one task due at each of ``dues`` (epoch seconds) whose payload is its due time."""
        raise NotImplementedError

    def workers(self, log_path: str) -> Workers:
        raise NotImplementedError

    def clear(self) -> None:
        """Remove every task (and record of one) this system holds now."""

    def close(self) -> None:
        """Remove everything the run created, and disconnect."""


class MutexcronSystem(System):
    def __init__(self, key: str, label: str, url: str, *, cancel_store: str | None = None,
                 prefetch: int = 10) -> None:
        super().__init__(key, label, settings=f"prefetch {prefetch} (default)", schedule_call="schedule_many")
        self.url = url
        self.cancel_store = cancel_store
        self.prefetch = prefetch
        self.queue: Any = None

    def open(self) -> None:
        from mutexcron.tasks import HandlerRegistry, TaskQueue

        self.queue = TaskQueue(self.url, cancel_store=self.cancel_store, handlers=HandlerRegistry(),
                               require_handlers=False)  # a producer: the worker processes handle its tasks

    def schedule(self, dues: Sequence[float]) -> None:
        options = [{"run_at": datetime.fromtimestamp(due, UTC)} for due in dues]
        self.queue.schedule_many([(TASK_TYPE, due, option) for due, option in zip(dues, options, strict=True)])

    def workers(self, log_path: str) -> Workers:
        return Workers([(_mutexcron_worker, (self.url, self.cancel_store, self.prefetch))], log_path)


class MutexcronRedis(MutexcronSystem):
    def __init__(self, url: str) -> None:
        self.prefix = f"mutexcron-bench:{uuid.uuid4().hex[:12]}:"
        super().__init__("mutexcron-redis", "mutexcron redis", _with_query(url, prefix=self.prefix))
        self.client = _redis_client(url)

    def open(self) -> None:
        info = self.client.info("server")
        self.server = f"Redis {info.get('redis_version', '?')} at {_where(self.url.split('?')[0])}"
        super().open()

    def clear(self) -> None:
        _delete_matching(self.client, self.prefix + "*")

    def close(self) -> None:
        with suppress(Exception):
            self.clear()
        if self.queue is not None:
            self.queue.close()
        self.client.close()


class MutexcronRabbitMQ(MutexcronSystem):
    def __init__(self, url: str, cancel_store: str) -> None:
        token = uuid.uuid4().hex[:12]
        self.prefix = f"mutexcron-bench-{token}."
        self.marks_prefix = f"mutexcron-bench:{token}:marks:"
        super().__init__("mutexcron-rabbitmq", "mutexcron rabbitmq", _with_query(url, prefix=self.prefix),
                         cancel_store=_with_query(cancel_store, prefix=self.marks_prefix))
        self.marks_client = _redis_client(cancel_store)
        self.amqp_url = url

    def open(self) -> None:
        import pika
        import pika.exceptions

        super().open()
        backend = self.queue.backend
        self.settings += (f"; {backend.topology.levels} levels x {backend.topology.unit_ms} ms, "
                          f"{backend.topology.delay_queue_type}; records in Redis")
        self.poll = f"none: TTL levels of {backend.topology.unit_ms} ms units"
        try:
            connection = pika.BlockingConnection(backend.parameters)  # the URL without mutexcron's own options
        except pika.exceptions.AMQPError as error:
            raise BenchError(f"cannot connect to RabbitMQ at {_where(self.amqp_url)}: {error!r}") from None
        try:
            version = connection._impl.server_properties.get("version", b"?")
            version = version.decode() if isinstance(version, bytes) else version
        finally:
            connection.close()
        self.server = f"RabbitMQ {version} at {_where(self.amqp_url)}"

    def clear(self) -> None:
        import pika
        import pika.exceptions

        backend = self.queue.backend
        connection = pika.BlockingConnection(backend.parameters)
        try:
            channel = connection.channel()
            names = [backend.topology.level_queue(k) for k in range(backend.topology.levels)]
            names.append(backend.topology.task_queue(TASK_TYPE))
            for name in names:
                try:
                    channel.queue_purge(name)
                except pika.exceptions.ChannelClosedByBroker:  # not declared yet
                    channel = connection.channel()
        finally:
            connection.close()
        _delete_matching(self.marks_client, self.marks_prefix + "*")

    def close(self) -> None:
        try:
            if self.queue is not None:
                self.queue.backend.delete_topology([TASK_TYPE])
        except Exception as error:
            print(f"warning: could not delete the RabbitMQ queues {self.prefix}*: {error}", file=sys.stderr)
        with suppress(Exception):
            _delete_matching(self.marks_client, self.marks_prefix + "*")
        if self.queue is not None:
            self.queue.close()
        self.marks_client.close()


class RunDatabase:
    """A PostgreSQL database made for the run on the server of ``postgres_url``; ``drop()`` removes it."""

    def __init__(self, postgres_url: str, prefix: str) -> None:
        self.postgres_url = postgres_url
        self.name = f"{prefix}_{uuid.uuid4().hex[:12]}"
        self.conninfo = urlunsplit(urlsplit(postgres_url)._replace(path=f"/{self.name}"))
        self.created = False

    def _server(self) -> Any:
        import psycopg

        return psycopg.connect(self.postgres_url, autocommit=True, connect_timeout=5)

    def create(self) -> str:
        """Create it; the server's description for the report."""
        with self._server() as server:
            version = server.execute("SHOW server_version").fetchone()[0]
            server.execute(f'CREATE DATABASE "{self.name}"')
        self.created = True
        return f"PostgreSQL {version} at {_where(self.postgres_url.rsplit('/', 1)[0])}"

    def drop(self) -> None:
        if not self.created:
            return
        try:
            with self._server() as server:
                server.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')
        except Exception as error:
            print(f"warning: could not drop the PostgreSQL database {self.name}: {error}", file=sys.stderr)


class MutexcronDjango(MutexcronSystem):
    """``django://`` on a PostgreSQL database created for the run (and dropped after it)."""

    def __init__(self, postgres_url: str) -> None:
        super().__init__("mutexcron-django", "mutexcron django/pg", "django://default")
        self.postgres_url = postgres_url
        self.database = RunDatabase(postgres_url, "mutexcron_bench")

    def django_settings(self, settings: dict[str, Any]) -> None:
        settings["DATABASES"]["default"] = _pg_settings(self.postgres_url, self.database.name)
        settings["INSTALLED_APPS"].append("mutexcron_django")

    def open(self) -> None:
        import importlib

        self.server = self.database.create()
        from django.core.management import call_command

        importlib.import_module("mutexcron_django.sql.tasks.backend")
        call_command("migrate", verbosity=0, interactive=False)
        super().open()
        backend = self.queue.backend
        wake = "LISTEN/NOTIFY" if backend.notifies else "no NOTIFY"
        self.settings += f"; {wake}, max_sleep {backend.max_sleep:g} s"
        self._release_connections()

    @staticmethod
    def _release_connections() -> None:
        from django.db import connections

        connections.close_all()  # before a fork: the children open their own

    def schedule(self, dues: Sequence[float]) -> None:
        super().schedule(dues)
        self._release_connections()

    def workers(self, log_path: str) -> Workers:
        self._release_connections()
        return super().workers(log_path)

    def clear(self) -> None:
        from mutexcron_django.models import ScheduledTask

        ScheduledTask.objects.all().delete()
        self._release_connections()

    def close(self) -> None:
        if self.queue is not None:
            with suppress(Exception):
                self._release_connections()
        self.database.drop()


def _pg_settings(postgres_url: str, database: str) -> dict[str, str]:
    parts = urlsplit(postgres_url)
    return {"ENGINE": "django.db.backends.postgresql", "NAME": database, "HOST": parts.hostname or "127.0.0.1",
            "PORT": str(parts.port or 5432), "USER": parts.username or "postgres", "PASSWORD": parts.password or ""}


DJTASKS_LABEL = "django_tasks_database"  # the app label of django_tasks_db (its tables' prefix)


class BenchRouter:
    """django-tasks-db's models in the "djtasks" database (when there is one), everything else in "default"."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        from django.conf import settings

        if model._meta.app_label == DJTASKS_LABEL and "djtasks" in settings.DATABASES:
            return "djtasks"
        return None

    db_for_write = db_for_read

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool:
        return (db == "djtasks") == (app_label == DJTASKS_LABEL)


def configure_django(systems: Sequence[System]) -> None:
    """Configure Django once for every system that needs it, each with a database of its own."""
    contributed: dict[str, Any] = {"DATABASES": {}, "INSTALLED_APPS": ["django.contrib.contenttypes",
                                                                       "django.contrib.auth"]}
    for system in systems:
        system.django_settings(contributed)
    databases = contributed["DATABASES"]
    if not databases:
        return
    databases.setdefault("default", next(iter(databases.values())))
    import django
    from django.conf import settings

    if settings.configured:
        raise BenchError("Django settings are configured already")
    settings.configure(SECRET_KEY="mutexcron-bench", USE_TZ=True, TIME_ZONE="UTC",
                       DEFAULT_AUTO_FIELD="django.db.models.BigAutoField", DATABASE_ROUTERS=[BenchRouter()],
                       MUTEXCRON={"AUTOSTART": False}, **contributed)
    django.setup()


class ProcrastinateSystem(System):
    """procrastinate on a PostgreSQL database created for the run (its schema applied), one worker."""

    def __init__(self, postgres_url: str) -> None:
        from procrastinate.worker import Worker

        poll = float(_default_of(Worker.__init__, "fetch_job_polling_interval"))
        concurrency = _default_of(Worker.__init__, "concurrency")
        notify = "LISTEN/NOTIFY" if _default_of(Worker.__init__, "listen_notify") else "no NOTIFY"
        super().__init__("procrastinate", "procrastinate",
                         settings=f"polling {poll:g} s, concurrency {concurrency} (defaults); "
                                  f"{notify}",
                         poll=f"{poll:g} s (fetch_job_polling_interval)",
                         schedule_call="configure(schedule_at=).defer, one by one")
        self.poll_seconds = poll
        self.database = RunDatabase(postgres_url, "mutexcron_bench_procrastinate")
        self.conninfo = self.database.conninfo
        self.app: Any = None

    def open(self) -> None:
        self.server = self.database.create()
        self.app = _procrastinate_app(self.conninfo)
        self.app.open()
        self.app.schema_manager.apply_schema()

    def schedule(self, dues: Sequence[float]) -> None:
        task = self.app.tasks["bench_noop"]
        for due in dues:
            task.configure(schedule_at=datetime.fromtimestamp(due, UTC)).defer(due=due)

    def workers(self, log_path: str) -> Workers:
        return Workers([(_procrastinate_worker, (self.conninfo,))], log_path)

    def clear(self) -> None:
        import psycopg

        with psycopg.connect(self.conninfo, autocommit=True) as connection:
            connection.execute("TRUNCATE procrastinate_jobs CASCADE")

    def close(self) -> None:
        if self.app is not None:
            with suppress(Exception):
                self.app.close()
        self.database.drop()


class DjangoTasksDb(System):
    """django-tasks' database backend (the django-tasks-db package: ``django_tasks_db.DatabaseBackend``, which
    django-tasks split out of ``django_tasks.backends.database``) on a PostgreSQL database of its own, with one
    ``db_worker``. On Django 6 it runs under ``django.tasks``, on Django 5.2 under the django-tasks backport."""

    def __init__(self, postgres_url: str) -> None:
        import django_tasks_db  # noqa: F401 - fail here if it is not installed

        super().__init__("djtasks", "django-tasks db", schedule_call="using(run_after=).enqueue, one by one")
        self.postgres_url = postgres_url
        self.database = RunDatabase(postgres_url, "mutexcron_bench_djtasks")

    def django_settings(self, settings: dict[str, Any]) -> None:
        import django

        settings["DATABASES"]["djtasks"] = _pg_settings(self.postgres_url, self.database.name)
        settings["INSTALLED_APPS"] += (["django_tasks"] if django.VERSION < (6, 0) else []) + ["django_tasks_db"]
        settings["TASKS"] = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

    def open(self) -> None:
        import django

        self.server = self.database.create()
        from django.core.management import call_command

        call_command("migrate", database="djtasks", verbosity=0, interactive=False)
        from django_tasks_db.management.commands import db_worker  # reads the settings: only once configured

        interval = float(_db_worker_default("interval", db_worker))
        self.settings = f"db_worker interval {interval:g} s (default), one task at a time"
        self.poll = f"{interval:g} s (db_worker --interval)"
        self.poll_seconds = interval
        if django.VERSION >= (6, 0):
            from django.tasks import task
        else:
            from django_tasks import task
        if not hasattr(globals()["djtasks_job"], "enqueue"):
            globals()["djtasks_job"] = task()(djtasks_job)  # the name the worker imports it by
        self._release_connections()

    @staticmethod
    def _release_connections() -> None:
        from django.db import connections

        connections.close_all()  # before a fork: the children open their own

    def schedule(self, dues: Sequence[float]) -> None:
        job = globals()["djtasks_job"]
        for due in dues:
            job.using(run_after=datetime.fromtimestamp(due, UTC)).enqueue(due)
        self._release_connections()

    def workers(self, log_path: str) -> Workers:
        self._release_connections()
        return Workers([(_djtasks_worker, ())], log_path)

    def clear(self) -> None:
        from django_tasks_db.models import DBTaskResult

        DBTaskResult.objects.all().delete()
        self._release_connections()

    def close(self) -> None:
        with suppress(Exception):
            self._release_connections()
        self.database.drop()


def _db_worker_default(option: str, module: Any) -> Any:
    """A default of django-tasks-db's ``db_worker`` command, read from its own argument parser."""
    from argparse import ArgumentParser

    parser = ArgumentParser()
    module.Command().add_arguments(parser)
    return parser.get_default(option)


def _claim_namespace(client: Any, pattern: str, url: str, option: str) -> None:
    """Refuse a database whose ``pattern`` keys are not ours: they are all deleted afterwards."""
    found = next(iter(client.scan_iter(match=pattern, count=1000)), None)
    if found is not None:
        raise BenchError(f"{_where(url)} already holds {pattern} keys (e.g. {found!r}); this benchmark deletes "
                         f"{pattern} there afterwards, so give it a database of its own with {option}")


class ArqSystem(System):
    def __init__(self, key: str, url: str, poll_delay: float | None) -> None:
        from arq.worker import Worker

        default = _default_of(Worker.__init__, "poll_delay")
        tuned = poll_delay is not None
        super().__init__(key, f"arq ({'tuned' if tuned else 'default'})",
                         schedule_call="enqueue_job(_defer_until), one by one")
        max_jobs = _default_of(Worker.__init__, "max_jobs")
        self.poll_seconds = float(poll_delay if tuned else default)
        self.settings = (f"poll_delay {self.poll_seconds:g} s ({'tuned' if tuned else 'default'}), "
                         f"max_jobs {max_jobs} (default)")
        self.poll = f"{self.poll_seconds:g} s (poll_delay)"
        self.url = url
        self.poll_delay = poll_delay
        self.queue_name = f"arq:queue:mutexcron-bench-{key}"
        self.client = _redis_client(url)
        self.loop: asyncio.AbstractEventLoop | None = None
        self.pool: Any = None

    def open(self) -> None:
        from arq import create_pool

        info = self.client.info("server")
        self.server = f"Redis {info.get('redis_version', '?')} at {_where(self.url)}"
        _claim_namespace(self.client, "arq:*", self.url, "--arq-redis")
        self.loop = asyncio.new_event_loop()
        self.pool = self.loop.run_until_complete(create_pool(_arq_settings(self.url),
                                                             default_queue_name=self.queue_name))

    def schedule(self, dues: Sequence[float]) -> None:
        assert self.loop is not None
        pool, queue_name = self.pool, self.queue_name

        async def enqueue() -> None:
            for due in dues:
                job = await pool.enqueue_job("bench_noop", due, _defer_until=datetime.fromtimestamp(due, UTC),
                                             _queue_name=queue_name)
                if job is None:
                    raise BenchError("arq enqueue_job returned None (a job id collision)")

        self.loop.run_until_complete(enqueue())

    def workers(self, log_path: str) -> Workers:
        return Workers([(_arq_worker, (self.url, self.queue_name, self.poll_delay))], log_path)

    def clear(self) -> None:
        _delete_matching(self.client, "arq:*")

    def close(self) -> None:
        with suppress(Exception):
            self.clear()
        if self.loop is not None:
            with suppress(Exception):
                self.loop.run_until_complete(self.pool.aclose())
            self.loop.close()
        self.client.close()


class RqSchedulerSystem(System):
    def __init__(self, key: str, url: str, interval: float | None) -> None:
        from rq_scheduler import Scheduler

        default = _default_of(Scheduler.__init__, "interval")
        tuned = interval is not None
        self.interval_seconds = float(interval if tuned else default)
        self.simple = tuned
        worker = "rq SimpleWorker (no fork)" if tuned else "rq Worker, a fork per job (default)"
        super().__init__(key, f"rq-scheduler ({'tuned' if tuned else 'default'})",
                         settings=f"interval {self.interval_seconds:g} s ({'tuned' if tuned else 'default'}); {worker}",
                         poll=f"{self.interval_seconds:g} s (interval)",
                         schedule_call="Scheduler.enqueue_at, one by one")
        self.url = url
        self.interval = interval
        self.queue_name = f"mutexcron-bench-{key}"
        self.client = _redis_client(url)
        self.scheduler: Any = None

    def open(self) -> None:
        from rq_scheduler import Scheduler

        info = self.client.info("server")
        self.server = f"Redis {info.get('redis_version', '?')} at {_where(self.url)}"
        _claim_namespace(self.client, "rq:*", self.url, "--rq-redis / --rq-tuned-redis")
        self.scheduler = Scheduler(queue_name=self.queue_name, connection=self.client)

    def schedule(self, dues: Sequence[float]) -> None:
        enqueue_at = self.scheduler.enqueue_at
        for due in dues:
            enqueue_at(datetime.fromtimestamp(due, UTC), rq_job, due)

    def workers(self, log_path: str) -> Workers:
        return Workers([(_rq_worker, (self.url, self.queue_name, self.simple)),
                        (_rq_scheduler, (self.url, self.queue_name, self.interval))], log_path)

    def clear(self) -> None:
        _delete_matching(self.client, "rq:*")

    def close(self) -> None:
        with suppress(Exception):
            self.clear()
        self.client.close()


# -- measuring -----------------------------------------------------------------------------------------------


@dataclass
class Rates:
    """tasks/s, one figure per round."""

    n: int = 0
    rounds: list[float] = field(default_factory=list)

    @property
    def median(self) -> float | None:
        return statistics.median(self.rounds) if self.rounds else None


@dataclass
class Lateness:
    """Handler start minus due time, in ms, pooled over the rounds (and each round's p99)."""

    samples_ms: list[float] = field(default_factory=list)
    round_p99_ms: list[float] = field(default_factory=list)

    def pct(self, p: float) -> float | None:
        return _percentile(self.samples_ms, p)

    @property
    def p99_of_rounds(self) -> float | None:
        """The median of the rounds' p99s: what the target is judged on (one disturbed round moves it less)."""
        return statistics.median(self.round_p99_ms) if self.round_p99_ms else None

    @property
    def early(self) -> int:
        return sum(1 for value in self.samples_ms if value < 0)


def _describe(error: BaseException) -> str:
    """``Type: the first line of the message`` (pika's connection errors have an empty one)."""
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else repr(error)


def _percentile(values: Sequence[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


@dataclass
class Result:
    system: System
    schedule: Rates = field(default_factory=Rates)
    dispatch: Rates = field(default_factory=Rates)
    lateness: Lateness = field(default_factory=Lateness)
    lateness_window: str = ""
    error: str | None = None
    skipped: str | None = None

    def fail(self, phase: str, error: BaseException) -> None:
        message = f"{phase}: {_describe(error)}"
        self.error = f"{self.error}; {message}" if self.error else message
        print(f"[{self.system.key}] {message}", file=sys.stderr)


class Bench:
    def __init__(self, args: argparse.Namespace, results: list[Result], schedulers: list[Result],
                 log_dir: str) -> None:
        self.args = args
        self.results = results
        self.schedulers = schedulers  # whose schedule call is measured (one per library)
        self.log_dir = log_dir
        self.verbose = not args.json
        self.logs = 0

    def _log_path(self, result: Result, phase: str) -> str:
        self.logs += 1
        return os.path.join(self.log_dir, f"{self.logs:03d}-{result.system.key}-{phase}.log")

    def _live(self, results: list[Result]) -> list[Result]:
        return [r for r in results if r.error is None and r.skipped is None]

    # 1. schedule --------------------------------------------------------------------------------------------

    def schedule_round(self, result: Result, n: int, timed: bool) -> None:
        system = result.system
        base = time.time() + 3600
        dues = [round(base + random.uniform(0, 3600), 3) for _ in range(n)]
        started = time.perf_counter()
        system.schedule(dues)
        seconds = time.perf_counter() - started
        system.clear()
        if timed:
            result.schedule.n = n
            result.schedule.rounds.append(n / seconds)

    # 2. dispatch --------------------------------------------------------------------------------------------

    def dispatch_round(self, result: Result, n: int, timed: bool) -> None:
        system = result.system
        now = time.time()
        system.schedule([round(now - 0.001, 3)] * n)  # all due already
        workers = system.workers(self._log_path(result, "dispatch"))
        try:
            workers.wait_for(n, timeout=30 + n / 20, what="dispatch")
        finally:
            workers.stop()
        starts = sorted(start for start, _ in workers.read())
        system.clear()
        if len(starts) < n:
            raise BenchError(f"dispatch: {len(starts)} of {n} tasks ran")
        skip = int(n * SKIP_FRACTION)
        span = starts[-1] - starts[skip]
        if timed:
            result.dispatch.n = n
            result.dispatch.rounds.append((n - skip - 1) / span if span > 0 else float("inf"))

    # 3. lateness --------------------------------------------------------------------------------------------

    def warm_up_workers(self, result: Result, workers: Workers) -> int:
        """Run a short untimed lateness round on freshly started workers: 20 tasks due now, then 40 due over
        the next 2 s (on RabbitMQ the first delayed messages through the level queues are the slowest).
        Returns the number of log lines they made."""
        now = time.time()
        result.system.schedule([round(now - 0.001, 3)] * 20)
        result.system.schedule(sorted(round(now + 0.3 + random.uniform(0, 2), 3) for _ in range(40)))
        workers.wait_for(60, timeout=30, what="lateness warm-up")
        return workers.count()

    def lateness_round(self, result: Result, workers: Workers, n: int, window: float, seen: int) -> int:
        start = time.time() + LEAD_SECONDS
        dues = sorted(round(start + random.uniform(0, window), 3) for _ in range(n))
        result.system.schedule(dues)
        workers.wait_for(seen + n, timeout=LEAD_SECONDS + window + 15, what="lateness")
        rows = workers.read()[seen:]
        late = [(start_at - due) * 1000 for start_at, due in rows]
        result.lateness.samples_ms += late
        result.lateness.round_p99_ms.append(_percentile(late, 99) or 0.0)
        return seen + n

    # the run --------------------------------------------------------------------------------------------

    def run(self) -> None:
        args = self.args
        rounds = args.rounds
        phases = set(args.phase or PHASES)
        every = self._live(self.results)
        self.clock = time.monotonic()

        self.say(f"[warm-up] one untimed schedule and dispatch round per system ({len(every)} systems) ...")
        for result in every:
            try:
                self.schedule_round(result, min(WARMUP_TASKS, self._schedule_size(result)), timed=False)
                self.dispatch_round(result, min(WARMUP_TASKS, self._dispatch_size(result)), timed=False)
            except Exception as error:
                result.fail("warm-up", error)

        if "schedule" in phases:
            schedulers = self._live(self.schedulers)
            self.say(f"[schedule] {rounds} rounds, systems in turn ...")
            for round_number in range(rounds):
                for result in _rotate(schedulers, round_number):
                    if result.error:
                        continue
                    try:
                        self.schedule_round(result, self._schedule_size(result), timed=True)
                    except Exception as error:
                        result.fail("schedule", error)

        if "dispatch" in phases:
            self.say(f"[dispatch] {rounds} rounds, systems in turn ...")
            for round_number in range(rounds):
                for result in _rotate(self._live(self.results), round_number):
                    try:
                        self.dispatch_round(result, self._dispatch_size(result), timed=True)
                    except Exception as error:
                        result.fail("dispatch", error)

        mutexcron = [r for r in self._live(self.results) if r.system.key.startswith("mutexcron")]
        if mutexcron and "lateness" in phases:
            self.say(f"[lateness] mutexcron: {rounds} rounds x {args.lateness} tasks due over {args.window:g} s, "
                     "systems in turn ...")
            self.lateness_mutexcron(mutexcron)

        others = [r for r in self._live(self.results) if not r.system.key.startswith("mutexcron")]
        if others and args.competitor_window > 0 and "lateness" in phases:
            self.say(f"[lateness] the other systems together: {args.competitor_lateness} tasks each, due over "
                     f"{args.competitor_window:g} s ...")
            self.lateness_together(others)
        self.say("")

    def say(self, message: str) -> None:
        if self.verbose:
            elapsed = f" ({time.monotonic() - self.clock:.0f} s so far)" if hasattr(self, "clock") else ""
            if message:
                print(message + elapsed, file=sys.stderr, flush=True)
            elif elapsed:
                print(f"[done]{elapsed}", file=sys.stderr, flush=True)

    def lateness_mutexcron(self, results: list[Result]) -> None:
        args = self.args
        running: dict[str, tuple[Workers, int]] = {}
        try:
            for result in results:
                try:
                    workers = result.system.workers(self._log_path(result, "lateness"))
                    running[result.system.key] = (workers, 0)
                    running[result.system.key] = (workers, self.warm_up_workers(result, workers))
                except Exception as error:
                    result.fail("lateness", error)
            for round_number in range(args.rounds):
                for result in _rotate(results, round_number):
                    if result.error or result.system.key not in running:
                        continue
                    workers, seen = running[result.system.key]
                    try:
                        seen = self.lateness_round(result, workers, args.lateness, args.window, seen)
                        running[result.system.key] = (workers, seen)
                    except Exception as error:
                        result.fail("lateness", error)
                    result.lateness_window = f"{args.rounds} x {args.lateness} over {args.window:g} s"
        finally:
            for workers, _ in running.values():
                workers.stop()
            for result in results:
                with suppress(Exception):
                    result.system.clear()

    def lateness_together(self, results: list[Result]) -> None:
        """All competitors at once, over one window (rq-scheduler's default interval is 60 s)."""
        args = self.args
        n, window = args.competitor_lateness, args.competitor_window
        begin = time.time()
        planned: dict[str, list[float]] = {}
        for result in results:  # everything scheduled before the workers start: their first pass sees it
            try:
                warm = [round(begin - 0.5, 3)] * 20
                dues = sorted(round(begin + 2 + random.uniform(0, window - 3), 3) for _ in range(n))
                result.system.schedule(warm + dues)
                planned[result.system.key] = dues
            except Exception as error:
                result.fail("lateness", error)
        running: list[tuple[Result, Workers]] = []
        try:
            for result in results:
                if result.system.key in planned:
                    running.append((result, result.system.workers(self._log_path(result, "lateness"))))
            longest_poll = max((getattr(r.system, "interval_seconds", 1.0) for r, _ in running), default=1.0)
            deadline = begin + window + longest_poll + 15
            for result, workers in running:
                try:
                    workers.wait_for(20 + n, timeout=max(1.0, deadline - time.time()), what="lateness")
                    rows = [row for row in workers.read() if row[1] >= begin]  # the warm-up tasks were due before
                    late = [(start_at - due) * 1000 for start_at, due in rows]
                    result.lateness.samples_ms = late
                    result.lateness.round_p99_ms = [_percentile(late, 99) or 0.0]
                    result.lateness_window = f"1 x {n} over {window:g} s, all {len(running)} at once"
                except Exception as error:
                    result.fail("lateness", error)
        finally:
            for _, workers in running:
                workers.stop()
            for result in results:
                with suppress(Exception):
                    result.system.clear()

    def _schedule_size(self, result: Result) -> int:
        if self.args.schedule:
            return self.args.schedule
        key = result.system.key
        return SCHEDULE_SIZES.get(key) or SCHEDULE_SIZES["arq" if key.startswith("arq") else "rq-scheduler"]

    def _dispatch_size(self, result: Result) -> int:
        return self.args.dispatch or DISPATCH_SIZES[result.system.key]


def _rotate(items: list[Result], by: int) -> list[Result]:
    if not items:
        return items
    by %= len(items)
    return items[by:] + items[:by]


# -- report --------------------------------------------------------------------------------------------------


def _rate(value: float | None) -> str:
    return f"{value:,.0f}" if value is not None else "-"


def _ms(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:,.1f}" if abs(value) < 1000 else f"{value:,.0f}"


def dispatch_ratios(results: list[Result]) -> dict[str, Any]:
    by_key = {r.system.key: r for r in results}
    redis = by_key.get("mutexcron-redis")
    mine = redis.dispatch.median if redis else None

    def best(keys: Sequence[str]) -> tuple[str | None, float | None]:
        found = [(by_key[k].dispatch.median, k) for k in keys if k in by_key and by_key[k].dispatch.median]
        if not found:
            return None, None
        rate, key = max(found)
        return key, rate

    default_key, default_rate = best(["arq-default", "rq-default"])
    tuned_key, tuned_rate = best(["arq-default", "rq-default", "arq-tuned", "rq-tuned"])
    ratio = mine / default_rate if mine and default_rate else None
    tuned_ratio = mine / tuned_rate if mine and tuned_rate else None
    return {
        "mutexcron_redis": mine, "best_default": default_key, "best_default_rate": default_rate,
        "ratio": ratio, "best_any": tuned_key, "best_any_rate": tuned_rate, "ratio_any": tuned_ratio,
        "target": TARGET_DISPATCH_RATIO,
        "verdict": None if ratio is None else ("PASS" if ratio >= TARGET_DISPATCH_RATIO else "MISS"),
    }


def lateness_verdicts(results: list[Result]) -> list[dict[str, Any]]:
    out = []
    for result in results:
        target = TARGET_P99_MS.get(result.system.key)
        if target is None:
            continue
        p99 = result.lateness.p99_of_rounds
        verdict = "SKIPPED" if result.skipped else "ERROR" if p99 is None else "PASS" if p99 <= target else "MISS"
        out.append({"system": result.system.key, "p99_ms": p99, "p99_all_tasks_ms": result.lateness.pct(99),
                    "rounds_p99_ms": result.lateness.round_p99_ms, "target_ms": target, "verdict": verdict})
    return out


def print_report(results: list[Result], schedulers: list[Result], header: dict[str, Any]) -> None:
    print("mutexcron delayed tasks vs arq, rq-scheduler, procrastinate and django-tasks: schedule and dispatch "
          "throughput, due-to-start lateness")
    print(f"Python {header['python']} on {header['machine']}, {header['cpus']} CPUs, load average {header['load']} "
          f"at the start; {header['rounds']} rounds, medians; arq {header['versions']['arq']}, "
          f"rq {header['versions']['rq']}, rq-scheduler {header['versions']['rq-scheduler']}, "
          f"redis-py {header['versions']['redis']}, procrastinate {header['versions']['procrastinate']}, "
          f"django-tasks-db {header['versions']['django-tasks-db']}, Django {header['versions']['Django']}")
    servers = sorted({r.system.server for r in results if r.system.server})
    if servers:
        print("Servers: " + "; ".join(servers))
    print()

    print("1. Schedule throughput: tasks due at spread-out times 1-2 h ahead (tasks/s)")
    head = f"{'system':<22} {'call':<36} {'tasks x rounds':>14} {'median':>9} {'min':>9} {'max':>9}"
    print(head)
    print("-" * len(head))
    for result in schedulers:
        _print_rates(result, result.schedule, f"{result.system.label.split(' (')[0]:<22} "
                                              f"{result.system.schedule_call:<36}")
    print()

    print("2. Dispatch throughput of one worker: tasks already due, no-op handler (tasks/s)")
    head = f"{'system':<24} {'settings':<66} {'tasks x rounds':>14} {'median':>9} {'min':>9} {'max':>9}"
    print(head)
    print("-" * len(head))
    for result in results:
        _print_rates(result, result.dispatch, f"{result.system.label:<24} {result.system.settings:<66}")
    print()

    print("3. Due-to-start lateness: handler start - due time, same clock (ms)")
    head = (f"{'system':<24} {'poll interval':<34} {'tasks':>6} {'p50':>8} {'p90':>8} {'p99':>8} {'max':>8} "
            f"{'early':>6}  {'p99 of each round':<20} rounds")
    print(head)
    print("-" * len(head))
    for result in results:
        late = result.lateness
        prefix = f"{result.system.label:<24} {result.system.poll[:34]:<34}"
        if not late.samples_ms:
            reason = result.skipped or result.error or "not measured"
            if not result.skipped and not result.error and result.system.key.startswith(("arq", "rq")):
                reason = "left out (--competitor-window 0)" if not late.samples_ms else reason
            print(f"{prefix} {'-':>6}  {reason}")
            continue
        by_round = " ".join(_ms(x) for x in late.round_p99_ms)
        print(f"{prefix} {len(late.samples_ms):>6} {_ms(late.pct(50)):>8} {_ms(late.pct(90)):>8} "
              f"{_ms(late.pct(99)):>8} {_ms(max(late.samples_ms)):>8} {late.early:>6}  {by_round:<20} "
              f"{result.lateness_window}")
    print()

    print("Targets")
    ratios = dispatch_ratios(results)
    if ratios["ratio"] is None:
        print("  dispatch: mutexcron redis / best of arq and rq-scheduler: -  (not measured)")
    else:
        print(f"  dispatch: mutexcron redis {_rate(ratios['mutexcron_redis'])}/s / best of arq and rq-scheduler with "
              f"default settings ({ratios['best_default']}, {_rate(ratios['best_default_rate'])}/s) = "
              f"{ratios['ratio']:.1f}x  {ratios['verdict']} (target >= {TARGET_DISPATCH_RATIO:g}x)")
        if ratios["best_any"] != ratios["best_default"]:
            print(f"            against the best tuned run ({ratios['best_any']}, {_rate(ratios['best_any_rate'])}/s):"
                  f" {ratios['ratio_any']:.1f}x")
    for verdict in lateness_verdicts(results):
        p99, pooled = verdict["p99_ms"], verdict["p99_all_tasks_ms"]
        print(f"  lateness p99 (median of the rounds): {verdict['system']} {_ms(p99)} ms  {verdict['verdict']} "
              f"(target <= {verdict['target_ms']:g} ms); over all its tasks at once: {_ms(pooled)} ms")
    for result in results:
        if result.skipped:
            print(f"  skipped: {result.system.label}: {result.skipped}")


def _print_rates(result: Result, rates: Rates, prefix: str) -> None:
    if not rates.rounds:
        reason = result.skipped or result.error or "not measured"
        print(f"{prefix} {'-':>14}  {reason}")
        return
    shape = f"{rates.n} x {len(rates.rounds)}"
    print(f"{prefix} {shape:>14} {_rate(rates.median):>9} {_rate(min(rates.rounds)):>9} {_rate(max(rates.rounds)):>9}")


def to_json(results: list[Result], schedulers: list[Result], header: dict[str, Any]) -> dict[str, Any]:
    def rates(r: Rates) -> dict[str, Any]:
        return {"tasks_per_round": r.n, "median": _round(r.median), "rounds": [_round(x) for x in r.rounds]}

    systems = []
    for result in results:
        late = result.lateness
        systems.append({
            "system": result.system.key, "label": result.system.label, "settings": result.system.settings,
            "poll_interval": result.system.poll, "server": result.system.server,
            "skipped": result.skipped, "error": result.error,
            "dispatch_tasks_per_s": rates(result.dispatch),
            "lateness_ms": {
                "tasks": len(late.samples_ms), "p50": _round(late.pct(50)), "p90": _round(late.pct(90)),
                "p99": _round(late.pct(99)), "max": _round(max(late.samples_ms, default=None)),
                "min": _round(min(late.samples_ms, default=None)), "early": late.early,
                "round_p99": [_round(x) for x in late.round_p99_ms], "how": result.lateness_window,
            },
        })
    schedule = [{"system": r.system.key, "call": r.system.schedule_call, "skipped": r.skipped, "error": r.error,
                 "schedule_tasks_per_s": rates(r.schedule)} for r in schedulers]
    ratios = {k: _round(v) if isinstance(v, float) else v for k, v in dispatch_ratios(results).items()}
    return {"benchmark": "mutexcron delayed tasks", **header, "schedule": schedule, "systems": systems,
            "dispatch_ratio": ratios,
            "lateness_targets": [
                {**v, "p99_ms": _round(v["p99_ms"]), "p99_all_tasks_ms": _round(v["p99_all_tasks_ms"]),
                 "rounds_p99_ms": [_round(x) for x in v["rounds_p99_ms"]]} for v in lateness_verdicts(results)]}


def _round(value: float | None) -> float | None:
    return round(value, 3) if value is not None else None


# -- main ----------------------------------------------------------------------------------------------------


SYSTEMS = ("redis", "rabbitmq", "django", "arq", "rq", "tuned", "procrastinate", "djtasks")
PHASES = ("schedule", "dispatch", "lateness")


def build(args: argparse.Namespace) -> tuple[list[Result], list[Result]]:
    """The systems, opened (or marked skipped); and the ones whose schedule call is measured."""
    makers: list[tuple[str, Callable[[], System]]] = []
    if "redis" not in args.skip:
        makers.append(("redis", lambda: MutexcronRedis(args.redis)))
    if "rabbitmq" not in args.skip:
        makers.append(("rabbitmq", lambda: MutexcronRabbitMQ(args.amqp, args.cancel_store or args.redis)))
    if "django" not in args.skip:
        makers.append(("django", lambda: MutexcronDjango(args.postgres)))
    if "arq" not in args.skip:
        makers.append(("arq", lambda: ArqSystem("arq-default", args.arq_redis, None)))
        if "tuned" not in args.skip:
            makers.append(("arq", lambda: ArqSystem("arq-tuned", args.arq_redis, args.arq_tuned_poll)))
    if "rq" not in args.skip:
        makers.append(("rq", lambda: RqSchedulerSystem("rq-default", args.rq_redis, None)))
        if "tuned" not in args.skip:
            makers.append(("rq", lambda: RqSchedulerSystem("rq-tuned", args.rq_tuned_redis, args.rq_tuned_interval)))
    if "procrastinate" not in args.skip:
        makers.append(("procrastinate", lambda: ProcrastinateSystem(args.postgres)))
    if "djtasks" not in args.skip:
        makers.append(("djtasks", lambda: DjangoTasksDb(args.postgres)))
    results = []
    for name, make in makers:
        try:
            system = make()
        except Exception as error:  # a missing library
            placeholder = System(f"{name}-unavailable", name)
            results.append(Result(placeholder, skipped=_describe(error)))
            continue
        results.append(Result(system))
    try:
        configure_django([r.system for r in results if not r.skipped])
    except Exception as error:
        for result in results:
            if result.system.key in ("mutexcron-django", "djtasks"):
                result.skipped = f"Django: {_describe(error)}"
    for result in results:
        if result.skipped:
            continue
        try:
            result.system.open()
        except Exception as error:
            result.skipped = _describe(error)
    schedulers = [r for r in results if r.system.key not in ("arq-tuned", "rq-tuned")]
    return results, schedulers


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3, help="timed rounds of each phase; medians are reported")
    parser.add_argument("--schedule", type=int, default=None, metavar="N",
                        help=f"tasks per schedule round for every system (default: {SCHEDULE_SIZES})")
    parser.add_argument("--dispatch", type=int, default=None, metavar="N",
                        help=f"tasks per dispatch round for every system (default: {DISPATCH_SIZES})")
    parser.add_argument("--lateness", type=int, default=150, metavar="N",
                        help="mutexcron: tasks per lateness round (default 150)")
    parser.add_argument("--window", type=float, default=3.0, metavar="S",
                        help="mutexcron: seconds over which a lateness round's tasks are due (default 3)")
    parser.add_argument("--competitor-lateness", type=int, default=120, metavar="N",
                        help="the other systems: tasks in their lateness run (default 120)")
    parser.add_argument("--competitor-window", type=float, default=60.0, metavar="S",
                        help="the other systems: seconds their lateness run spans; rq-scheduler's default "
                             "interval is 60 s (default 60; 0 leaves their lateness out)")
    parser.add_argument("--redis", metavar="URL", default=DEFAULT_REDIS_URL,
                        help=f"mutexcron's Redis backend (keys under a unique prefix; default {DEFAULT_REDIS_URL})")
    parser.add_argument("--amqp", metavar="URL", default=DEFAULT_AMQP_URL, help=f"default {DEFAULT_AMQP_URL}")
    parser.add_argument("--cancel-store", metavar="URL", default=None,
                        help="the RabbitMQ backend's cancel store (default: the --redis URL)")
    parser.add_argument("--postgres", metavar="URL", default=DEFAULT_POSTGRES_URL,
                        help="a PostgreSQL server for django:// (a database is created and dropped; "
                             f"default {DEFAULT_POSTGRES_URL})")
    parser.add_argument("--arq-redis", metavar="URL", default=DEFAULT_ARQ_URL,
                        help=f"arq's database; its arq:* keys are deleted after (default {DEFAULT_ARQ_URL})")
    parser.add_argument("--rq-redis", metavar="URL", default=DEFAULT_RQ_URL,
                        help=f"rq-scheduler's database; its rq:* keys are deleted after (default {DEFAULT_RQ_URL})")
    parser.add_argument("--rq-tuned-redis", metavar="URL", default=DEFAULT_RQ_TUNED_URL,
                        help=f"the tuned rq-scheduler's database (default {DEFAULT_RQ_TUNED_URL})")
    parser.add_argument("--arq-tuned-poll", type=float, default=ARQ_TUNED_POLL, metavar="S",
                        help=f"arq's poll_delay in the tuned run (default {ARQ_TUNED_POLL})")
    parser.add_argument("--rq-tuned-interval", type=float, default=RQ_TUNED_INTERVAL, metavar="S",
                        help=f"rq-scheduler's interval in the tuned run (default {RQ_TUNED_INTERVAL})")
    parser.add_argument("--skip", action="append", choices=SYSTEMS, default=[],
                        help="leave a system out (tuned: the tuned arq and rq-scheduler runs)")
    parser.add_argument("--phase", action="append", choices=PHASES, default=[],
                        help="measure only this phase (repeatable; default: all three)")
    parser.add_argument("--seed", type=int, default=None, help="seed of the random due times")
    parser.add_argument("--json", action="store_true", help="print the results as JSON instead of tables")
    args = parser.parse_args(argv)
    if args.rounds < 1 or (args.schedule is not None and args.schedule < 1) or \
            (args.dispatch is not None and args.dispatch < 20) or args.lateness < 1 or args.window <= 0:
        parser.error("--rounds, --schedule and --lateness must be at least 1, --dispatch at least 20, --window > 0")
    if args.competitor_window and args.competitor_window < 5:
        parser.error("--competitor-window must be 0 (off) or at least 5 seconds")
    random.seed(args.seed)

    header = {
        "python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
        "load": " ".join(f"{x:.2f}" for x in os.getloadavg()), "rounds": args.rounds,
        "versions": {name: _version(name) for name in ("arq", "rq", "rq-scheduler", "redis", "pika", "Django",
                                                        "procrastinate", "django-tasks", "django-tasks-db")},
    }
    def interrupted(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # a kill cleans up as Ctrl-C does

    signal.signal(signal.SIGTERM, interrupted)
    started = time.monotonic()
    results: list[Result] = []
    schedulers: list[Result] = []
    log_dir = tempfile.mkdtemp(prefix="mutexcron-bench-tasks-")
    try:
        results, schedulers = build(args)
        for result in results:
            if result.skipped and not args.json:
                print(f"[{result.system.label}] skipped: {result.skipped}", file=sys.stderr)
        Bench(args, results, schedulers, log_dir).run()
    except KeyboardInterrupt:
        print("interrupted: cleaning up", file=sys.stderr)
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not stop the clean-up
        for result in results:
            try:
                result.system.close()
            except Exception as error:
                print(f"warning: cleaning up {result.system.label}: {error}", file=sys.stderr)
        for path in Path(log_dir).glob("*.log"):
            path.unlink()
        with suppress(OSError):
            os.rmdir(log_dir)
    header["seconds"] = round(time.monotonic() - started, 1)

    if args.json:
        print(json.dumps(to_json(results, schedulers, header), indent=2))
    else:
        print_report(results, schedulers, header)
        print(f"\n(run took {header['seconds']:.0f} s)")
    return 0


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "not installed"


if __name__ == "__main__":
    sys.exit(main())

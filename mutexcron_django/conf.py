"""The ``MUTEXCRON`` setting, read with documented defaults; a bad value raises ImproperlyConfigured."""

from __future__ import annotations

import difflib
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from mutexcron import _options
from mutexcron.errors import StoreConfigError
from mutexcron.plugins import class_for_scheme
from mutexcron.stores import SCHEMES as STORE_SCHEMES
from mutexcron.stores import LockStore, store_from_url
from mutexcron.tasks import TaskBackend, TaskQueue
from mutexcron.tasks.queue import BACKENDS as TASK_BACKEND_SCHEMES
from mutexcron.tasks.records.base import SCHEMES as CANCEL_STORE_SCHEMES
from mutexcron.tasks.records.base import TaskRecordStore, cancel_store_from_url
from mutexcron.telemetry import load_part
from mutexcron.urls import mask_url, shown, url_scheme

DEFAULTS: dict[str, Any] = {
    "STORE": "django",  # the project's own database; or "django://<alias>", "redis://…", "mongodb://…"
    "AUTOSTART": True,  # start a scheduler in each serving web process
    "TIMEZONE": None,  # default: settings.TIME_ZONE
    "INSTANCE_ID": None,  # default: host:pid
    "HISTORY_RETENTION": timedelta(days=30),  # None keeps run history forever
    "MODULES": ["cron"],  # <app>.<module> files imported at start-up to find @mutex_cron jobs
    "TASKS": {},  # delayed one-off tasks: see TASKS_DEFAULTS
    "SYNC_INTERVAL": timedelta(seconds=5),  # how often a running scheduler reads schedule overrides (or seconds)
    "MAX_WORKERS": 10,  # the scheduler's worker threads: fires at once, and so database connections (README)
    "METRICS": False,  # Prometheus metrics of the runs (the "prometheus" extra); served by mutexcron_django.urls
    "TRACING": False,  # OpenTelemetry spans of the runs (the "otel" extra)
}

TASKS_DEFAULTS: dict[str, Any] = {
    "BACKEND": "django",  # the project's own database; or "django://<alias>", "redis://…", "amqp://…"
    "CANCEL_STORE": None,  # amqp:// (a backend that needs_record_store) only, required there: "django" or "redis://…"
    "MODULES": ["tasks"],  # <app>.<module> files imported at start-up to find @task_handler handlers
    # run_on="tasks" jobs: how soon the task of a worker that died mid-body runs again (timedelta or seconds)
    "JOB_VISIBILITY_TIMEOUT": timedelta(minutes=5),
    # False: get_task_queue().schedule() takes a task type that no handler of this process knows (its handlers
    # live only in the workers' code); True refuses it with UnknownTaskType, as a typo would otherwise wait forever
    "REQUIRE_HANDLERS": True,
}


def _masked_repr(self: object) -> str:
    """A settings object's repr with every URL's password masked (reprs reach logs and error trackers)."""
    values = ", ".join(f"{field.name}={shown(getattr(self, field.name))}" for field in fields(self))  # type: ignore[arg-type]
    return f"{type(self).__name__}({values})"


@dataclass(frozen=True, repr=False)
class TasksSettings:
    """``MUTEXCRON["TASKS"]``, checked; ``backend`` and ``cancel_store`` are what TaskQueue takes."""

    backend: str | TaskBackend = "django://"
    cancel_store: str | None = None
    modules: tuple[str, ...] = ("tasks",)
    job_visibility_timeout: timedelta = timedelta(minutes=5)
    require_handlers: bool = True
    metrics: bool = False  # MUTEXCRON["METRICS"] and ["TRACING"]: what the queue is built with
    tracing: bool = False
    __repr__ = _masked_repr

    @property
    def urls(self) -> list[str]:
        """The configured URLs (to scrub their passwords from any text shown to people)."""
        return [url for url in (self.backend, self.cancel_store) if isinstance(url, str)]

    def build_queue(self, **options: Any) -> TaskQueue:
        """A new TaskQueue on the configured backend (``options`` go to TaskQueue: handlers, worker_id; metrics
        and tracing default to ``MUTEXCRON["METRICS"]`` and ``["TRACING"]``).

        Building connects to nothing; a malformed URL raises ImproperlyConfigured naming the key."""
        marks: TaskRecordStore | None = None
        if self.cancel_store is not None:
            try:
                marks = cancel_store_from_url(self.cancel_store, backend="the RabbitMQ task backend")
            except StoreConfigError as error:
                raise ImproperlyConfigured(f"MUTEXCRON['TASKS']['CANCEL_STORE']: {error}") from None
        options = {"metrics": self.metrics, "tracing": self.tracing, "require_handlers": self.require_handlers,
                   **options}
        try:
            return TaskQueue(self.backend, cancel_store=marks, **options)  # type: ignore[arg-type]
        except StoreConfigError as error:
            if marks is not None:
                marks.close()
            raise ImproperlyConfigured(f"MUTEXCRON['TASKS']['BACKEND']: {error}") from None

    def describe(self) -> str:
        """The backend (and cancel store) as shown to people: passwords masked."""
        backend = mask_url(self.backend) if isinstance(self.backend, str) else repr(self.backend)
        if self.cancel_store is None:
            return backend
        return f"{backend} (cancel store {mask_url(self.cancel_store)})"


@dataclass(frozen=True, repr=False)
class MutexcronSettings:
    store: str | LockStore
    autostart: bool
    timezone: str
    instance_id: str | None
    history_retention: timedelta | None
    modules: tuple[str, ...]
    tasks: TasksSettings = TasksSettings()
    sync_interval: timedelta = timedelta(seconds=5)
    metrics: bool = False
    tracing: bool = False
    max_workers: int = 10
    __repr__ = _masked_repr

    @property
    def store_spec(self) -> str | LockStore:
        """What to give ``store_from_url`` or ``Scheduler``: "django" is the default database's URL."""
        return "django://" if self.store == "django" else self.store

    def build_store(self) -> LockStore:
        """A store from the setting (a new one each call, unless the setting is a LockStore object)."""
        try:
            return store_from_url(self.store_spec)
        except StoreConfigError as error:
            scheme = url_scheme(self.store) if isinstance(self.store, str) else None
            known = scheme is None or scheme in STORE_SCHEMES
            hint = "" if known else _did_you_mean(scheme or "", _url_choices("://", STORE_SCHEMES))
            raise ImproperlyConfigured(f"MUTEXCRON['STORE']: {error}{hint}") from None

    @contextmanager
    def open_store(self) -> Iterator[LockStore]:
        """The store for one use: built from a URL, it is closed afterwards; a LockStore object of the settings is
        the user's, shared with the rest of the process, and stays open."""
        store = self.build_store()
        try:
            yield store
        finally:
            if isinstance(self.store, str):
                with suppress(Exception):  # closing may fail on a dead connection: it is dropped all the same
                    store.close()


def _fail(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"MUTEXCRON[{key!r}] {message}")


def _with_defaults(setting: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``given`` over ``defaults``; a key that is not in ``defaults`` (a typo) is an error."""
    unknown = set(given) - set(defaults)
    if unknown:
        raise ImproperlyConfigured(f"{setting} has unknown key(s) {sorted(unknown)}; known keys: {sorted(defaults)}")
    return {**defaults, **given}


def get_settings() -> MutexcronSettings:
    """Read and check ``settings.MUTEXCRON`` (a dict; every key optional)."""
    user = getattr(settings, "MUTEXCRON", {})
    if not isinstance(user, dict):
        raise ImproperlyConfigured(f"MUTEXCRON must be a dict, not {type(user).__name__}")
    values = _with_defaults("MUTEXCRON", user, DEFAULTS)

    store = _store_setting(values["STORE"])
    if not isinstance(values["AUTOSTART"], bool):
        raise _fail("AUTOSTART", f"must be True or False, not {values['AUTOSTART']!r}")
    timezone = values["TIMEZONE"] or settings.TIME_ZONE or "UTC"
    _options.zone(timezone, what="MUTEXCRON['TIMEZONE']", error=ImproperlyConfigured)
    instance_id = _options.instance_id(values["INSTANCE_ID"], what="MUTEXCRON['INSTANCE_ID']",
                                       error=ImproperlyConfigured)
    retention = values["HISTORY_RETENTION"]
    if retention is not None and (not isinstance(retention, timedelta) or retention <= timedelta(0)):
        raise _fail("HISTORY_RETENTION", f"must be a positive timedelta or None, not {retention!r}")
    modules = _module_names(values["MODULES"], "MUTEXCRON['MODULES']", example="cron")
    sync_interval = _options.duration(values["SYNC_INTERVAL"], what="MUTEXCRON['SYNC_INTERVAL']",
                                      error=ImproperlyConfigured, allow_zero=False)
    max_workers = _options.count(values["MAX_WORKERS"], what="MUTEXCRON['MAX_WORKERS']", error=ImproperlyConfigured,
                                 maximum=1000)
    metrics, tracing = _telemetry(values, "METRICS"), _telemetry(values, "TRACING")
    tasks = replace(_tasks_settings(values["TASKS"]), metrics=metrics, tracing=tracing)
    return MutexcronSettings(store, values["AUTOSTART"], timezone, instance_id, retention, modules,
                             tasks, sync_interval, metrics, tracing, max_workers)


def _module_names(value: object, what: str, *, example: str) -> tuple[str, ...]:
    """``value`` as the names of the modules to import: a list (or tuple) of non-empty strings."""
    if not isinstance(value, list | tuple) or not all(isinstance(m, str) and m for m in value):
        raise ImproperlyConfigured(f'{what} must be a list of module names such as ["{example}"], not {value!r}')
    return tuple(value)


def _did_you_mean(value: str, choices: dict[str, str]) -> str:
    """'; did you mean "<choice>"?' for the choice (a key of ``choices``, shown as its value) closest to a mistyped
    ``value``, or "" if none is close."""
    close = difflib.get_close_matches(value.strip().lower(), list(choices), n=1, cutoff=0.6)
    return f'; did you mean "{choices[close[0]]}"?' if close else ""


def _url_choices(value: str, schemes: Iterable[str]) -> dict[str, str]:
    """What a mistyped ``value`` may have meant: "django", or one of ``schemes`` (as "<scheme>://…"); compared by
    scheme when ``value`` is a URL."""
    choices = {scheme: f"{scheme}://…" for scheme in schemes}
    return choices if "://" in value else {**choices, "django": "django"}


def _store_setting(store: object) -> str | LockStore:
    """``MUTEXCRON["STORE"]``: "django", a store URL of a known scheme, a dotted path or a LockStore; a mistyped
    value is refused naming the valid ones and the closest of them ("djnago": did you mean "django"?)."""
    others = ", ".join(f"{scheme}://" for scheme in sorted(set(STORE_SCHEMES) - {"django"}))
    valid = f'"django" (the project\'s database), "django://<alias>", a store URL ({others}) or a dotted path'
    if isinstance(store, LockStore):
        return store
    if not isinstance(store, str) or not store.strip():
        raise _fail("STORE", f"must be {valid}, or a LockStore, not {shown(store)}")
    is_dotted_path = "." in store and not any(mark in store for mark in " :/@")
    if "://" in store or store == "django" or is_dotted_path:  # a URL's scheme is checked by build_store()
        return store
    hint = _did_you_mean(store, _url_choices(store, STORE_SCHEMES))
    raise _fail("STORE", f"is {shown(store)}; it must be {valid}{hint}")


def _telemetry(values: dict[str, Any], key: str) -> bool:
    """``MUTEXCRON["METRICS"]`` or ``["TRACING"]``: True or False; True needs its extra installed."""
    value = values[key]
    if not isinstance(value, bool):
        raise _fail(key, f"must be True or False, not {value!r}")
    if value:
        load_part(key.lower(), what=f"MUTEXCRON[{key!r}] = True", error=ImproperlyConfigured)
    return value


def _task_fail(key: str, message: str) -> ImproperlyConfigured:
    return ImproperlyConfigured(f"MUTEXCRON['TASKS'][{key!r}] {message}")


def _scheme(url: str) -> str:
    return url_scheme(url) or ""


def _needs_record_store(spec: str | TaskBackend) -> bool:
    """Whether the backend of ``spec`` (a URL of a known scheme) keeps its task records in a cancel store, as its
    class declares (``needs_record_store``); False for a backend object, which was built with whatever it needs."""
    if not isinstance(spec, str):
        return False
    try:
        backend_class = class_for_scheme(spec, TASK_BACKEND_SCHEMES, "task backend")
    except StoreConfigError as error:  # its module cannot be imported (a missing extra): as building it would say
        raise ImproperlyConfigured(f"MUTEXCRON['TASKS']['BACKEND']: {error}") from None
    is_backend = isinstance(backend_class, type) and issubclass(backend_class, TaskBackend)
    return is_backend and backend_class.needs_record_store


def _tasks_settings(tasks: object) -> TasksSettings:
    """Check ``MUTEXCRON["TASKS"]`` (a dict, every key optional). URLs are shown with passwords masked.

    Only the shape is checked here (types, schemes, which keys go together); a malformed URL is found
    when the queue is built (``AppConfig.ready()`` builds it once when TASKS is set, connecting to nothing).
    """
    if not isinstance(tasks, dict):
        raise _fail("TASKS", f'must be a dict such as {{"BACKEND": "redis://…"}}, not {type(tasks).__name__}')
    values = _with_defaults("MUTEXCRON['TASKS']", tasks, TASKS_DEFAULTS)

    backend = values["BACKEND"]
    spec: str | TaskBackend
    if isinstance(backend, str):
        spec = "django://" if backend.strip() == "django" else backend.strip()
        if _scheme(spec) not in TASK_BACKEND_SCHEMES:
            typed = _scheme(spec) if "://" in spec else spec
            hint = _did_you_mean(typed, _url_choices(spec, TASK_BACKEND_SCHEMES))
            raise _task_fail("BACKEND", f'must be "django", "django://<alias>", a redis://… or amqp://… URL, '
                                        f"or a TaskBackend, not {shown(backend)}{hint}")
    elif isinstance(backend, TaskBackend):
        spec = backend
    else:
        raise _task_fail("BACKEND", f'must be "django", a task backend URL or a TaskBackend, not {shown(backend)}')

    cancel_store = values["CANCEL_STORE"]
    needs_marks = _needs_record_store(spec)
    if cancel_store is None:
        if needs_marks and isinstance(spec, str):
            raise _task_fail("CANCEL_STORE", f"is required with the task backend {mask_url(spec)!r}, which keeps its "
                                             'task records there (as RabbitMQ does): "django" (the project\'s '
                                             "database) or a redis://… URL")
    elif not needs_marks:
        raise _task_fail("CANCEL_STORE", f"is only for the RabbitMQ (amqp://) backend, whose broker cannot cancel "
                                         f"a waiting message; remove it (it is {shown(cancel_store)}, the backend "
                                         f"{shown(spec)})")
    elif not isinstance(cancel_store, str) or not cancel_store.strip():
        raise _task_fail("CANCEL_STORE", f'must be "django" or a redis://… URL, not {shown(cancel_store)}')
    else:
        cancel_store = "django://" if cancel_store.strip() == "django" else cancel_store.strip()
        if _scheme(cancel_store) not in {*CANCEL_STORE_SCHEMES, "django"}:
            typed = _scheme(cancel_store) if "://" in values["CANCEL_STORE"] else values["CANCEL_STORE"].strip()
            hint = _did_you_mean(typed, _url_choices(values["CANCEL_STORE"], {*CANCEL_STORE_SCHEMES, "django"}))
            raise _task_fail("CANCEL_STORE", f'must be "django" or a redis://… URL, not {shown(cancel_store)}{hint}')

    modules = _module_names(values["MODULES"], "MUTEXCRON['TASKS']['MODULES']", example="tasks")
    visibility = _options.duration(values["JOB_VISIBILITY_TIMEOUT"], error=ImproperlyConfigured, allow_zero=False,
                                   what="MUTEXCRON['TASKS']['JOB_VISIBILITY_TIMEOUT']")
    if not isinstance(values["REQUIRE_HANDLERS"], bool):
        raise _task_fail("REQUIRE_HANDLERS", f"must be True or False, not {values['REQUIRE_HANDLERS']!r}")
    return TasksSettings(spec, cancel_store, modules, visibility, values["REQUIRE_HANDLERS"])

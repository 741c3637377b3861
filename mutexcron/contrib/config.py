"""The ``MUTEXCRON_*`` keys of a Flask app's config (any mapping: no framework needed to read them), named as the
Django app's ``MUTEXCRON`` setting names them, and when a web process starts its scheduler."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from dataclasses import dataclass, fields
from datetime import timedelta, tzinfo
from typing import Any, Literal

from .. import _options
from ..errors import SchedulerConfigError, StoreConfigError
from ..registry import Registry, default_registry
from ..scheduling.scheduler import Scheduler
from ..stores import LockStore
from ..tasks.queue import TaskQueue
from ..urls import shown

__all__ = ["DEFAULTS", "PREFIX", "AppSettings", "read_config", "start_mode"]

PREFIX = "MUTEXCRON_"
DEFAULTS: dict[str, Any] = {
    "MUTEXCRON_STORE": None,  # required: a store URL ("redis://…", "mongodb://…"), a dotted path or a LockStore
    "MUTEXCRON_AUTOSTART": True,  # start a scheduler in each process that serves requests
    "MUTEXCRON_TIMEZONE": "UTC",  # the zone of the jobs' cron specs that name none
    "MUTEXCRON_INSTANCE_ID": None,  # default: host:pid
    "MUTEXCRON_MODULES": (),  # dotted module names imported before the scheduler is built (where the jobs are)
    "MUTEXCRON_SYNC_INTERVAL": timedelta(seconds=5),  # how often a running scheduler reads overrides (or seconds)
    "MUTEXCRON_MAX_WORKERS": 10,  # the scheduler's worker threads: fires at once
    "MUTEXCRON_METRICS": False,  # Prometheus metrics of the runs (the "prometheus" extra), served at metrics/
    "MUTEXCRON_TRACING": False,  # OpenTelemetry spans of the runs (the "otel" extra)
    "MUTEXCRON_HEALTH_TOKEN": None,  # health/ shows job names and errors to "Authorization: Bearer <token>" only
    "MUTEXCRON_TASKS": None,  # where run_on="tasks" bodies are enqueued: a task backend URL or a TaskQueue
}
RELOADER_CHILD = "WERKZEUG_RUN_MAIN"  # set to "true" by Werkzeug's reloader in the child it serves from


def _fail(key: str, message: str) -> SchedulerConfigError:
    return SchedulerConfigError(f"app.config[{key!r}] {message}")


@dataclass(frozen=True, repr=False)
class AppSettings:
    """The checked ``MUTEXCRON_*`` keys; :meth:`build_scheduler` makes this process's scheduler from them."""

    store: str | LockStore
    autostart: bool = True
    timezone: tzinfo | str = "UTC"
    instance_id: str | None = None
    modules: tuple[str, ...] = ()
    sync_interval: timedelta = timedelta(seconds=5)
    max_workers: int = 10
    metrics: bool = False
    tracing: bool = False
    health_token: str | None = None
    tasks: str | TaskQueue | None = None

    def __repr__(self) -> str:  # reprs reach logs: the store URL's password and the token stay out
        masked = {"health_token": "***"} if self.health_token else {}
        values = ", ".join(f"{field.name}={masked.get(field.name) or shown(getattr(self, field.name))}"
                           for field in fields(self))
        return f"AppSettings({values})"

    def build_scheduler(self, registry: Registry | None = None) -> Scheduler:
        """A new Scheduler on the configured store (built, not started: nothing is connected yet)."""
        try:
            return Scheduler(self.store, registry=registry or default_registry, instance_id=self.instance_id,
                             timezone=self.timezone, sync_interval=self.sync_interval, max_workers=self.max_workers,
                             metrics=self.metrics, tracing=self.tracing, tasks=self.tasks)
        except StoreConfigError as error:
            raise _fail("MUTEXCRON_STORE", f"is not a usable store: {error}") from None


def read_config(config: Mapping[str, Any]) -> AppSettings:
    """Check the ``MUTEXCRON_*`` keys of ``config`` (every key optional but ``MUTEXCRON_STORE``) and import
    ``MUTEXCRON_MODULES``; a bad value or an unknown ``MUTEXCRON_`` key (a typo) raises SchedulerConfigError
    naming the key."""
    unknown = sorted(key for key in config if isinstance(key, str) and key.startswith(PREFIX) and key not in DEFAULTS)
    if unknown:
        raise SchedulerConfigError(f"app.config has unknown key(s) {unknown}; known keys: {sorted(DEFAULTS)}")
    values = {key: config.get(key, default) for key, default in DEFAULTS.items()}
    store = values["MUTEXCRON_STORE"]
    if not isinstance(store, str | LockStore) or (isinstance(store, str) and not store.strip()):
        raise _fail("MUTEXCRON_STORE", f'is required: a store URL such as "redis://127.0.0.1:6379/0", a dotted '
                                       f"path or a LockStore, not {shown(store)}")
    flags = {key: values[key] for key in ("MUTEXCRON_AUTOSTART", "MUTEXCRON_METRICS", "MUTEXCRON_TRACING")}
    for key, value in flags.items():
        if not isinstance(value, bool):
            raise _fail(key, f"must be True or False, not {shown(value)}")
    token = values["MUTEXCRON_HEALTH_TOKEN"]
    if token is not None and (not isinstance(token, str) or len(token.strip()) < 16):
        raise _fail("MUTEXCRON_HEALTH_TOKEN", "must be None or a secret string of at least 16 characters")
    tasks = values["MUTEXCRON_TASKS"]
    if tasks is not None and not isinstance(tasks, TaskQueue) and not (isinstance(tasks, str) and "://" in tasks):
        raise _fail("MUTEXCRON_TASKS", f"must be None, a task backend URL (redis://, amqp://) or a TaskQueue, "
                                       f"not {shown(tasks)}")
    return AppSettings(
        store=store,
        autostart=values["MUTEXCRON_AUTOSTART"],
        timezone=_options.zone(values["MUTEXCRON_TIMEZONE"], what="app.config['MUTEXCRON_TIMEZONE']",
                               error=SchedulerConfigError),
        instance_id=_options.instance_id(values["MUTEXCRON_INSTANCE_ID"], what="app.config['MUTEXCRON_INSTANCE_ID']",
                                         error=SchedulerConfigError),
        modules=_import_modules(values["MUTEXCRON_MODULES"]),
        sync_interval=_options.duration(values["MUTEXCRON_SYNC_INTERVAL"], what="app.config['MUTEXCRON_SYNC_INTERVAL']",
                                        error=SchedulerConfigError, allow_zero=False),
        max_workers=_options.count(values["MUTEXCRON_MAX_WORKERS"], what="app.config['MUTEXCRON_MAX_WORKERS']",
                                   error=SchedulerConfigError, maximum=1000),
        metrics=values["MUTEXCRON_METRICS"],
        tracing=values["MUTEXCRON_TRACING"],
        health_token=token,
        tasks=tasks,
    )


def _import_modules(modules: object) -> tuple[str, ...]:
    """Import each module of ``MUTEXCRON_MODULES`` (its ``@mutex_cron`` jobs register themselves)."""
    if isinstance(modules, str) or not isinstance(modules, list | tuple) or not all(
            isinstance(name, str) and name for name in modules):
        raise _fail("MUTEXCRON_MODULES", f'must be a list of dotted module names such as ["myapp.cron"], '
                                         f"not {shown(modules)}")
    for name in modules:
        try:
            importlib.import_module(name)
        except ImportError as error:
            raise _fail("MUTEXCRON_MODULES", f"names {name!r}, which cannot be imported: {error}") from error
    return tuple(modules)


def start_mode(environ: Mapping[str, str]) -> Literal["now", "first_request"]:
    """When a process that loads the app starts its scheduler: ``"now"`` in the Werkzeug reloader's child (it
    serves; ``WERKZEUG_RUN_MAIN`` is ``"true"``), else ``"first_request"``. A process that never serves a
    request (the reloader's parent, a pre-forking master such as gunicorn's with ``--preload``, a ``flask``
    command) thus never starts one."""
    return "now" if environ.get(RELOADER_CHILD) == "true" else "first_request"

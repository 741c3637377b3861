"""The subcommands that run in the foreground until SIGTERM or SIGINT: ``run`` (the scheduler, for a
dedicated cron process) and ``worker`` (a task worker). While one runs, the signals set an event and
mutexcron's log goes to stderr unless the project configured logging; a second signal to a worker that
is finishing its task makes it leave at once."""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured
from django.core.management.base import BaseCommand, CommandError

from mutexcron.backend_helpers import SignalFlag
from mutexcron.errors import MutexcronError, SchedulerConfigError
from mutexcron.urls import scrub

from ... import runtime
from ...conf import get_settings

if TYPE_CHECKING:
    from mutexcron.tasks import TaskQueue

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)  # how `run` and `worker` are stopped


@contextlib.contextmanager
def foreground(command: str, verbosity: int) -> Iterator[tuple[SignalFlag, list[int]]]:
    """While the block runs: SIGTERM and SIGINT set the yielded event (and are listed, first first), and
    mutexcron's log goes to stderr unless the project configured logging. Both are undone after."""
    stop = SignalFlag()  # not a threading.Event: setting one from a signal handler can deadlock
    received: list[int] = []

    def on_signal(signum: int, frame: object) -> None:
        received.append(signum)  # nothing else here: printing from a signal handler can re-enter I/O
        stop.set()

    try:
        previous = {sig: signal.signal(sig, on_signal) for sig in STOP_SIGNALS}
    except ValueError:  # signal handlers can only be installed in the main thread
        raise CommandError(f"mutexcron {command} must run in the main thread (it stops on SIGTERM/SIGINT)") \
            from None
    logger = logging.getLogger("mutexcron")
    level = logger.level
    log_handler = _log_to_stderr(logger, verbosity)
    try:
        yield stop, received
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if log_handler is not None:
            logger.removeHandler(log_handler)
            logger.setLevel(level)


def _log_to_stderr(logger: logging.Logger, verbosity: int) -> logging.Handler | None:
    """Show mutexcron's log (runs, skips, store outages) on stderr unless the project configured logging."""
    if logger.hasHandlers():
        return None
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.WARNING if verbosity == 0 else logging.INFO if verbosity == 1 else logging.DEBUG)
    if logger.level == logging.NOTSET or logger.level > handler.level:
        logger.setLevel(handler.level)
    logger.addHandler(handler)
    return handler


def run_scheduler(command: BaseCommand, *, verbosity: int) -> None:
    """The scheduler until a signal; then stop it, waiting up to its shutdown timeout for running jobs."""
    with foreground("run", verbosity) as (stop, received):
        scheduler = runtime.start()
        command.stdout.write(
            f"mutexcron scheduler {scheduler.instance_id} running {len(scheduler.registry)} job(s) on "
            f"{scheduler.store!r} (time zone {scheduler.timezone}); stop with SIGTERM or Ctrl-C"
        )
        command.stdout.flush()
        while not stop.wait(0.5):
            pass
        timeout = scheduler.shutdown_timeout.total_seconds()
        command.stdout.write(
            f"mutexcron: {signal.Signals(received[0]).name} received; stopping scheduler "
            f"{scheduler.instance_id} (waiting up to {timeout:g}s for running jobs)"
        )
        command.stdout.flush()
        runtime.stop()
    still_running = scheduler.running_jobs()  # bodies that outlived the shutdown timeout
    if still_running:
        message = (f"job(s) {', '.join(still_running)} still running after {timeout:g}s; exiting anyway, "
                   "their locks expire with their lease")
        if getattr(command, "_called_from_command_line", False):  # set by run_from_argv (not in the stubs)
            # Python would otherwise wait at exit for the job threads, past the bound.
            command.stderr.write(f"mutexcron: {message}")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)
        raise CommandError(message)
    command.stdout.write(f"mutexcron: scheduler {scheduler.instance_id} stopped")


def worker(command: BaseCommand, *, types: list[str] | None, prefetch: int, verbosity: int) -> None:
    """A task worker for ``types`` (default: every registered one) until a signal, which stops it after
    the task it is running."""
    from ...job_runs import install as install_job_runner  # the task side is imported only by the subcommand
    from ...job_runs import runs_jobs
    from ...tasks import get_task_queue

    try:
        queue = get_task_queue()
    except ImproperlyConfigured as error:
        raise CommandError(str(error)) from None
    try:
        runner = install_job_runner(queue) if runs_jobs() else None  # the bodies of run_on="tasks" jobs
    except SchedulerConfigError as error:  # a job the workers refuse (its lease is shorter than the visibility)
        raise CommandError(str(error)) from None
    try:
        _work(command, queue, types=types, prefetch=prefetch, verbosity=verbosity)
    finally:
        if runner is not None:
            runner.close()


def _work(command: BaseCommand, queue: TaskQueue, *, types: list[str] | None, prefetch: int, verbosity: int) -> None:
    conf = get_settings().tasks
    registered = queue.handlers.types()
    if types is None:
        if not registered:
            raise CommandError(
                "no task handlers are registered (looked for @task_handler in the installed apps' modules: "
                f"{', '.join(conf.modules)}; see MUTEXCRON['TASKS']['MODULES'])"
            )
        types = registered
    unknown = [name for name in types if name not in queue.handlers]
    if unknown:
        raise CommandError(f"unknown task type(s) {', '.join(unknown)}; registered: {', '.join(registered) or 'none'}")

    failure: list[BaseException] = []

    def consume() -> None:
        try:
            queue.run_worker(types, prefetch=prefetch)
        except BaseException as error:  # reported by the main thread
            failure.append(error)
        finally:
            stop.set()

    thread = threading.Thread(target=consume, name="mutexcron-task-worker", daemon=True)
    with foreground("worker", verbosity) as (stop, received):
        command.stdout.write(
            f"mutexcron task worker {queue.worker_id} running {', '.join(types)} on "
            f"{scrub(repr(queue.backend), *conf.urls)} (prefetch {prefetch}); stop with SIGTERM or Ctrl-C"
        )
        command.stdout.flush()
        thread.start()
        while not stop.wait(0.5):
            pass
        if received:
            command.stdout.write(f"mutexcron: {signal.Signals(received[0]).name} received; stopping task worker "
                                 f"{queue.worker_id} after the task it is running")
            command.stdout.flush()
        # A second signal while the running task finishes: leave at once; the task comes back after its
        # visibility timeout (the claim was not released), to this or another worker.
        for sig in STOP_SIGNALS:
            signal.signal(sig, _leave_now)
        queue.stop(timeout=0)  # holds even if run_worker has not begun consuming yet
        thread.join()
    if failure:
        failed = failure[0]
        if isinstance(failed, MutexcronError | ImproperlyConfigured):
            raise CommandError(f"the task worker stopped: {scrub(str(failed), *conf.urls)}") from None
        raise failed
    command.stdout.write(f"mutexcron: task worker {queue.worker_id} stopped")


def _leave_now(signum: int, frame: object) -> None:
    sys.stderr.write(f"mutexcron: {signal.Signals(signum).name} received again; exiting without waiting for "
                     "the running task (it runs again after its visibility timeout)\n")
    sys.stderr.flush()
    os._exit(1)

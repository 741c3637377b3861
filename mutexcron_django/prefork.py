"""Pre-forking masters: a server process that loads the app and then forks the workers that serve it (gunicorn
``--preload``, uWSGI without ``--lazy-apps``). The master serves no request and runs no scheduler; each worker
starts a fresh one (new threads, new connections) right after its fork, through the hook this module installs."""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

__all__ = ["master_kind", "run_in_each_worker"]

# The functions of gunicorn's arbiter that fork a process that is no worker: the re-executed master of a USR2
# upgrade (which execs at once) and the arbiter of "dirty" workers (gunicorn 27).
GUNICORN_OTHER_FORKS = frozenset({"reexec", "spawn_dirty_arbiter"})


def master_kind() -> str | None:
    """``"gunicorn"`` or ``"uwsgi"`` if this process is a master loading the app before it forks its workers; None
    if it serves requests itself (a worker that loads the app, or a server of one process)."""
    uwsgi = sys.modules.get("uwsgi")
    if uwsgi is not None:
        worker_id: Callable[[], int] = uwsgi.worker_id
        return "uwsgi" if worker_id() == 0 else None  # 0: the master (or the first worker, before it forked)
    modules = set(_calling_modules())
    in_gunicorn = any(module.startswith("gunicorn.") for module in modules)
    in_a_worker = any(module.startswith("gunicorn.workers") for module in modules)
    return "gunicorn" if in_gunicorn and not in_a_worker else None


def run_in_each_worker(kind: str, boot: Callable[[], None]) -> None:
    """Call ``boot()`` in each worker that the master of ``kind`` forks from now on, right after the fork."""
    if kind == "uwsgi":
        _after_uwsgi_forks(boot)
    else:
        _after_gunicorn_forks(boot)


def _calling_modules() -> list[str]:
    """The modules of the functions on this thread's stack, innermost first."""
    names = []
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        names.append(str(frame.f_globals.get("__name__", "")))
        frame = frame.f_back
    return names


def _after_gunicorn_forks(boot: Callable[[], None]) -> None:
    """gunicorn forks with ``os.fork()``, which runs Python's at-fork hooks. The hook is inherited by every process
    forked later, workers' own children too: only a child of the master, forked to be a worker, boots."""
    master = os.getpid()

    def after_fork_in_child() -> None:
        if os.getppid() != master or _forked_by(GUNICORN_OTHER_FORKS):
            return
        boot()

    os.register_at_fork(after_in_child=after_fork_in_child)


def _forked_by(functions: frozenset[str]) -> bool:
    """Whether one of gunicorn's arbiter ``functions`` called the fork that this child returns from."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "gunicorn.arbiter" and frame.f_code.co_name in functions:
            return True
        frame = frame.f_back
    return False


def _after_uwsgi_forks(boot: Callable[[], None]) -> None:
    """uWSGI forks in C, without Python's at-fork hooks: it calls its own post-fork hook in each worker (and in
    the process that loaded the app, if it becomes worker 1). uwsgidecorators' ``postfork`` chains hooks; without
    it, the hook in place is chained by hand."""
    uwsgi: Any = sys.modules["uwsgi"]  # only importable inside uWSGI, which imported it

    def after_fork() -> None:
        if uwsgi.worker_id() > 0:  # a worker (mules and spoolers serve no request)
            boot()

    try:
        postfork: Callable[[Callable[[], None]], object] = importlib.import_module("uwsgidecorators").postfork
    except ImportError:
        previous = getattr(uwsgi, "post_fork_hook", None)

        def chained() -> None:
            if previous is not None:
                previous()
            after_fork()

        uwsgi.post_fork_hook = chained
    else:
        postfork(after_fork)

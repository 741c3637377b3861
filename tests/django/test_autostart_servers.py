"""AUTOSTART in real servers: one scheduler in each process that serves requests, none anywhere else.

Every process logs "mutexcron scheduler started in process <pid>" when it starts its scheduler (and, at
DEBUG, "mutexcron autostart: process <pid> is ..." when the app loads), and the job's body writes its pid
into its ledger, so the tests can tell exactly which processes ran a scheduler:

- ``manage.py runserver`` with the autoreloader: the serving child, never the reloader parent (the
  parent's pid is the Popen pid);
- gunicorn, 2 workers, with and without ``--preload``: one scheduler per worker, started after the fork,
  none in the master (the Popen pid); eagerly with ``post_worker_init`` from mutexcron_django.gunicorn,
  otherwise at each worker's first request; also when started as ``python -m gunicorn``;
- ``manage.py migrate`` and ``manage.py check``: none.

Wherever several schedulers run, each tick still runs exactly once across the processes.
"""

from __future__ import annotations

import re
import shutil
import signal
import sys
import threading
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from tests.django.fleet_support import (
    HERE,
    Proc,
    Site,
    assert_each_tick_once,
    free_port,
    holds_for,
    http_get,
    now,
    parent_pid,
    sqlite_database,
)
from tests.support import next_whole_second_after, wait_until, whole_seconds

pytestmark = pytest.mark.fleet

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))
BOOTED = re.compile(r"Booting worker with pid: (\d+)")
LOADED = re.compile(r"fleet: app loaded in worker pid=(\d+)")
KIND = re.compile(r"mutexcron autostart: process (\d+) is (.+)")
TICKS = 6  # ticks checked wherever several schedulers run: every one ran once


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with sqlite_database(tmp_path) as database:
        site = Site(tmp_path, database)
        try:
            site.migrate()
            yield site
        finally:
            site.stop_all()
            print(site.report())  # shown by pytest only if the test failed


def kinds(proc: Proc) -> dict[int, str]:
    """What autostart decided in each process that loaded the app: pid -> "runserver", "server", ..."""
    return {int(pid): kind for pid, kind in KIND.findall(proc.text())}


def wait_for_ticks(site: Site, proc: Proc, count: int) -> list[datetime]:
    """Wait for ``count`` ticks run from the next whole second on; return the window of ticks to judge."""
    first = next_whole_second_after(now())

    def enough() -> bool:
        proc.assert_alive()
        return site.ticks_run_since(first) >= count + 1

    wait_until(enough, timeout=count + 8, what=f"{count + 1} ticks to run")
    # Every scheduler has fired (and recorded) every tick of the window: it ends a second before now.
    return whole_seconds(first, (now() - timedelta(seconds=1)).replace(microsecond=0))


# -- runserver -----------------------------------------------------------------------------------------


def test_runserver_with_autoreloader_starts_one_scheduler_in_the_serving_child(site: Site) -> None:
    port = free_port()
    server = site.spawn("runserver", site.manage("runserver", f"127.0.0.1:{port}"))
    parent = server.pid

    def serving_pid() -> int | None:
        server.assert_alive()
        body = http_get(f"http://127.0.0.1:{port}/pid/", timeout=2)
        return int(body) if body else None

    child = wait_until(serving_pid, timeout=20, what="runserver to serve /pid/")
    wait_until(lambda: server.started_pids(), timeout=10, what="the scheduler to start")
    assert child != parent, "runserver served from the parent: the autoreloader is not in use"
    assert parent_pid(child) == parent, "the serving process is not the reloader's child"
    assert kinds(server) == {parent: "not a serving process", child: "runserver"}  # both loaded the app

    window = wait_for_ticks(site, server, TICKS)
    reloads = re.findall(r"(\S+) changed, reloading", server.text())
    assert server.started_pids() == [child], (
        f"schedulers started in {server.started_pids()}; parent {parent}"
        + (f" (the autoreloader restarted the child: {', '.join(reloads)} changed during the test)" if reloads else "")
    )
    assert {b["pid"] for b in site.bodies()} == {child}
    instance = next(b["instance"] for b in site.bodies())
    assert instance.endswith(f":{child}"), instance  # the default INSTANCE_ID is host:pid
    summary = assert_each_tick_once(site, window, {instance})
    print(f"runserver: reloader parent pid {parent} (no scheduler), serving child pid {child} (one scheduler); "
          f"{summary['ticks']} ticks, each run once")


APP_INIT_WARNING = "Accessing the database during app initialization is discouraged"


def test_runserver_autostart_queries_no_database_during_app_initialization(site: Site) -> None:
    port = free_port()
    server = site.spawn("runserver", site.manage("runserver", f"127.0.0.1:{port}", "--noreload"))

    def serving() -> bool:
        server.assert_alive()
        return http_get(f"http://127.0.0.1:{port}/pid/", timeout=2) is not None

    wait_until(serving, timeout=20, what="runserver to serve /pid/")
    assert server.started_pids() == [server.pid]
    assert APP_INIT_WARNING not in server.text(), server.tail()


# -- gunicorn ------------------------------------------------------------------------------------------


def gunicorn(site: Site, *, preload: bool, eager: bool) -> tuple[Proc, int]:
    if not Path(GUNICORN).exists() and shutil.which("gunicorn") is None:
        pytest.skip("gunicorn is not installed")
    port = free_port()
    config = HERE / ("gunicorn_eager.py" if eager else "gunicorn_lazy.py")
    command = [GUNICORN if Path(GUNICORN).exists() else "gunicorn", "tests.django.fleet_wsgi:application",
               "--workers", "2", "--bind", f"127.0.0.1:{port}", "--config", str(config),
               "--graceful-timeout", "10", *(["--preload"] if preload else [])]
    if has_control_socket():
        command.append("--no-control-socket")  # one shared ~/.gunicorn/gunicorn.ctl for every test's server
    return site.spawn("gunicorn", command), port


def has_control_socket() -> bool:
    """gunicorn 27 opens a control socket at one fixed path unless told not to (--no-control-socket)."""
    from gunicorn import config

    return any(getattr(setting, "name", None) == "control_socket_disable" for setting in vars(config).values())


def worker_pids(proc: Proc) -> set[int]:
    return {int(pid) for pid in BOOTED.findall(proc.text())}


def hit_every_worker(port: int, workers: set[int]) -> set[int]:
    """Concurrent slow requests until every worker answered one (a busy sync worker leaves the next to the
    other); returns the pids that answered."""
    answered: set[int] = set()
    lock = threading.Lock()

    def request() -> None:
        body = http_get(f"http://127.0.0.1:{port}/pid/?sleep=0.3", timeout=5)
        if body:
            with lock:
                answered.add(int(body))

    def all_answered() -> bool:
        threads = [threading.Thread(target=request) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return answered >= workers

    wait_until(all_answered, timeout=15, what=f"every worker {sorted(workers)} to answer a request", interval=0)
    return answered


@pytest.mark.parametrize("preload", [False, True], ids=["no-preload", "preload"])
def test_gunicorn_post_worker_init_starts_one_scheduler_per_worker_after_the_fork(site: Site, preload: bool) -> None:
    server, _ = gunicorn(site, preload=preload, eager=True)
    master = server.pid

    def two_started() -> bool:
        server.assert_alive()
        return len(server.started_pids()) >= 2

    wait_until(two_started, timeout=20, what="both workers to start a scheduler (no request sent)")
    workers = worker_pids(server)
    assert len(workers) == 2 and master not in workers
    assert all(parent_pid(worker) == master for worker in workers), "a worker is not the master's child"
    window = wait_for_ticks(site, server, TICKS)
    started = server.started_pids()
    assert sorted(started) == sorted(workers), f"schedulers in {started}; master {master}, workers {workers}"
    # --preload: the app (and AppConfig.ready) was loaded in the master only, which started no scheduler.
    assert kinds(server) == ({master: "server"} if preload else dict.fromkeys(workers, "server"))
    assert {b["pid"] for b in site.bodies()} <= workers
    recorded = {instance for r in site.database.job_runs() for instance in (r["instance"], *r["fired"])}
    assert {int(i.rsplit(":", 1)[1]) for i in recorded} == workers, recorded  # default INSTANCE_ID host:pid
    summary = assert_each_tick_once(site, window, recorded)
    print(f"gunicorn {'--preload ' if preload else ''}+ post_worker_init: master {master} (no scheduler), "
          f"schedulers in workers {sorted(started)}; {summary['ticks']} ticks each run once, "
          f"runs per instance {summary['runs_per_instance']}")


@pytest.mark.parametrize("preload", [False, True], ids=["no-preload", "preload"])
def test_gunicorn_without_the_hook_starts_each_worker_scheduler_at_its_first_request(site: Site,
                                                                                      preload: bool) -> None:
    server, port = gunicorn(site, preload=preload, eager=False)
    master = server.pid

    def both_loaded() -> set[int] | None:
        server.assert_alive()
        loaded = {int(pid) for pid in LOADED.findall(server.text())}
        return loaded if len(loaded) == 2 else None

    workers = wait_until(both_loaded, timeout=20, what="both workers to load the app")
    assert workers == worker_pids(server) and master not in workers

    def nothing_started() -> None:
        assert server.started_pids() == [], "a scheduler started before any request"
        assert site.bodies() == []

    holds_for(nothing_started, seconds=2.5)  # over two ticks: loaded, idle workers run no scheduler

    answered = hit_every_worker(port, workers)
    assert answered == workers
    wait_until(lambda: len(server.started_pids()) >= 2, timeout=10, what="both workers to start a scheduler")
    window = wait_for_ticks(site, server, TICKS)
    started = server.started_pids()
    assert sorted(started) == sorted(workers), f"schedulers in {started}; master {master}, workers {workers}"
    assert kinds(server) == ({master: "server"} if preload else dict.fromkeys(workers, "server"))
    assert {b["pid"] for b in site.bodies()} <= workers
    recorded = {instance for r in site.database.job_runs() for instance in (r["instance"], *r["fired"])}
    assert {int(i.rsplit(":", 1)[1]) for i in recorded} == workers, recorded
    summary = assert_each_tick_once(site, window, recorded)
    print(f"gunicorn {'--preload ' if preload else ''}without hook: master {master} (no scheduler), no scheduler "
          f"before the first request, then schedulers in workers {sorted(started)}; {summary['ticks']} ticks each "
          f"run once, runs per instance {summary['runs_per_instance']}")


def test_python_m_gunicorn_starts_the_scheduler_at_the_first_request(site: Site) -> None:
    """``python -m gunicorn``: argv[0] is .../gunicorn/__main__.py, which must not be taken for ``python -m django``
    (it was: the worker said "not a serving process" and never started a scheduler)."""
    port = free_port()
    command = [sys.executable, "-m", "gunicorn", "tests.django.fleet_wsgi:application", "--workers", "1",
               "--bind", f"127.0.0.1:{port}", "--config", str(HERE / "gunicorn_lazy.py")]
    if has_control_socket():
        command.append("--no-control-socket")
    server = site.spawn("gunicorn", command)

    def loaded() -> set[int] | None:
        server.assert_alive()
        return {int(pid) for pid in LOADED.findall(server.text())} or None

    workers = wait_until(loaded, timeout=20, what="the worker to load the app")
    answered = http_get(f"http://127.0.0.1:{port}/pid/", timeout=5)
    assert answered is not None and int(answered) in workers
    # request_started starts the scheduler before the view runs: it has started once the answer is here.
    assert server.started_pids() == [int(answered)], server.tail()


def test_gunicorn_stops_cleanly_on_sigterm(site: Site) -> None:
    server, _ = gunicorn(site, preload=True, eager=True)
    wait_until(lambda: len(server.started_pids()) >= 2, timeout=20, what="both workers to start a scheduler")
    server.signal_group(signal.SIGTERM)  # as a supervisor would: master and workers
    assert server.wait_exit(timeout=20) == 0, server.tail()
    assert "Traceback" not in server.text(), server.tail()


# -- commands that serve nothing -----------------------------------------------------------------------


@pytest.mark.parametrize("command", [["migrate", "--noinput"], ["check"], ["check", "--deploy"]],
                         ids=["migrate", "check", "check-deploy"])
def test_management_commands_start_no_scheduler(site: Site, command: list[str]) -> None:
    proc = site.run("-".join(c.strip("-") for c in command), site.manage(*command))
    assert proc.started_pids() == [], proc.tail()
    assert kinds(proc) == {proc.pid: "not a serving process"}, proc.tail()
    assert site.bodies() == []
    assert site.database.job_runs() == []

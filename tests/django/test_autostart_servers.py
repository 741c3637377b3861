"""AUTOSTART in runserver and gunicorn: one scheduler in each process that serves requests, started when it
boots (no request sent, no hook in the configuration), none anywhere else.

- ``manage.py runserver`` with the autoreloader: the serving child, never the reloader parent (the
  parent's pid is the Popen pid);
- gunicorn, 2 workers, with and without ``--preload``: one scheduler per worker, none in the master (the Popen
  pid), with no request (with ``--preload`` the app is loaded in the master, and each worker starts a fresh
  scheduler after its fork); with the old ``post_worker_init`` hook still one per worker; also when started as
  ``python -m gunicorn``; with AUTOSTART off, each worker says so once;
- ``manage.py migrate`` and ``manage.py check``: none.

Wherever several schedulers run, each tick still runs exactly once across the processes. Uvicorn, Daphne and
uWSGI: test_autostart_asgi_uwsgi.py.
"""

from __future__ import annotations

import re
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.django.autostart_support import (
    AUTOSTART_OFF,
    assert_one_run_per_tick_by,
    fleet_site,
    kinds,
    pids,
    server_program,
    wait_for_schedulers,
    wait_for_ticks,
)
from tests.django.fleet_support import (
    HERE,
    Proc,
    Site,
    assert_each_tick_once,
    free_port,
    holds_for,
    http_get,
    parent_pid,
)
from tests.support import wait_until

pytestmark = pytest.mark.fleet

GUNICORN = str(Path(sys.executable).with_name("gunicorn"))  # test_metrics_gunicorn.py's too
BOOTED = r"Booting worker with pid: (\d+)"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with fleet_site(tmp_path) as site:
        yield site


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

    window = wait_for_ticks(site, server)
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


def gunicorn(site: Site, *options: str, preload: bool = False, workers: int = 2, **env: str) -> tuple[Proc, int]:
    """``gunicorn tests.django.fleet_wsgi:application`` with no configuration of mutexcron's (``options``: more)."""
    port = free_port()
    command = [server_program("gunicorn"), "tests.django.fleet_wsgi:application", "--workers", str(workers),
               "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "10", *(["--preload"] if preload else []),
               *options]
    if has_control_socket():
        command.append("--no-control-socket")  # one shared ~/.gunicorn/gunicorn.ctl for every test's server
    return site.spawn("gunicorn", command, **env), port


def has_control_socket() -> bool:
    """gunicorn 27 opens a control socket at one fixed path unless told not to (--no-control-socket)."""
    from gunicorn import config

    return any(getattr(setting, "name", None) == "control_socket_disable" for setting in vars(config).values())


@pytest.mark.parametrize("preload", [False, True], ids=["no-preload", "preload"])
def test_gunicorn_starts_a_scheduler_in_each_worker_at_boot_with_no_request(site: Site, preload: bool) -> None:
    server, _ = gunicorn(site, preload=preload)
    master = server.pid

    started = wait_for_schedulers(server, 2, "both workers to start a scheduler, with no request sent")
    workers = pids(BOOTED, server)
    assert len(workers) == 2 and master not in workers
    assert all(parent_pid(worker) == master for worker in workers), "a worker is not the master's child"
    summary = assert_one_run_per_tick_by(site, server, workers)
    assert sorted(server.started_pids()) == sorted(started) == sorted(workers), f"master {master}"
    # --preload: the app (and AppConfig.ready) was loaded in the master only, which started no scheduler: each
    # worker started a fresh one after its fork.
    assert kinds(server) == ({master: "server"} if preload else dict.fromkeys(workers, "server"))
    assert "Traceback" not in server.text(), server.tail()
    print(f"gunicorn {'--preload ' if preload else ''}with no request: master {master} (no scheduler), schedulers "
          f"in workers {sorted(workers)}; {summary['ticks']} ticks each run once, runs per instance "
          f"{summary['runs_per_instance']}")


def test_gunicorn_with_the_old_post_worker_init_hook_still_starts_one_scheduler_per_worker(site: Site) -> None:
    server, _ = gunicorn(site, "--config", str(HERE / "gunicorn_eager.py"), preload=True)

    wait_for_schedulers(server, 2, "both workers to start a scheduler")
    # The master logs "Booting worker" after its fork, which may come after the worker's own start.
    wait_until(lambda: len(pids(BOOTED, server)) == 2, timeout=15, what="the master to log both workers' boot")

    def one_each() -> None:  # the hook runs after autostart's start, and starts nothing more
        assert sorted(server.started_pids()) == sorted(pids(BOOTED, server))

    holds_for(one_each, seconds=1.0)


def test_python_m_gunicorn_starts_the_scheduler_at_boot(site: Site) -> None:
    """``python -m gunicorn``: argv[0] is .../gunicorn/__main__.py, which must not be taken for ``python -m django``
    (it was: the worker said "not a serving process" and never started a scheduler)."""
    command = [sys.executable, "-m", "gunicorn", "tests.django.fleet_wsgi:application", "--workers", "1",
               "--bind", f"127.0.0.1:{free_port()}"]
    if has_control_socket():
        command.append("--no-control-socket")
    server = site.spawn("gunicorn", command)

    (started,) = wait_for_schedulers(server, 1, "the worker to start a scheduler, with no request sent")
    assert pids(BOOTED, server) == {started}


@pytest.mark.parametrize("preload", [False, True], ids=["no-preload", "preload"])
def test_gunicorn_workers_with_autostart_off_each_say_so_and_run_no_scheduler(site: Site, preload: bool) -> None:
    server, _ = gunicorn(site, preload=preload, FLEET_AUTOSTART="0")

    workers = wait_until(lambda: len(found := pids(BOOTED, server)) == 2 and found, timeout=20,
                         what="both workers to boot")
    wait_until(lambda: pids(AUTOSTART_OFF, server) == workers, timeout=10, what="each worker to say why")

    def none_runs() -> None:
        assert server.started_pids() == [] and site.bodies() == []

    holds_for(none_runs, seconds=1.5)  # over a tick
    assert len(re.findall(AUTOSTART_OFF, server.text())) == 2, server.tail()  # once each, the master never


def test_gunicorn_stops_cleanly_on_sigterm(site: Site) -> None:
    server, _ = gunicorn(site, preload=True)
    wait_for_schedulers(server, 2, "both workers to start a scheduler")
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

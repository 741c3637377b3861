"""AUTOSTART in Uvicorn, Daphne and uWSGI, and in a server it does not know: one scheduler in each process that
serves requests, started when it boots (no request sent), none in a supervisor or a master.

- Uvicorn (ASGI) with ``--workers 2``: its supervisor (the Popen pid) imports no app and runs none; each worker
  process imports the app and starts one;
- Daphne (ASGI, one process): one;
- uWSGI, 2 workers under a master, with and without ``--lazy-apps``: one per worker, none in the master (which,
  without ``--lazy-apps``, loaded the app before it forked the workers);
- the standard library's wsgiref, which AUTOSTART does not know: no scheduler, and a warning at its first request.

Wherever several schedulers run, each tick still runs exactly once across the processes.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.django.autostart_support import (
    assert_one_run_per_tick_by,
    fleet_site,
    kinds,
    pids,
    server_program,
    wait_for_schedulers,
)
from tests.django.fleet_support import HERE, Site, free_port, holds_for, http_get, parent_pid
from tests.support import wait_until

pytestmark = pytest.mark.fleet

UNKNOWN_SERVER = r"process (\d+) serves requests but runs no scheduler"


@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with fleet_site(tmp_path) as site:
        yield site


def test_uvicorn_with_two_workers_starts_a_scheduler_in_each_worker_at_boot(site: Site) -> None:
    command = [server_program("uvicorn"), "tests.django.fleet_asgi:application", "--workers", "2",
               "--host", "127.0.0.1", "--port", str(free_port())]
    server = site.spawn("uvicorn", command)
    supervisor = server.pid

    started = set(wait_for_schedulers(server, 2, "both workers to start a scheduler, with no request sent"))
    workers = pids(r"Started server process \[(\d+)\]", server)
    assert started == workers and supervisor not in workers and len(workers) == 2
    assert all(parent_pid(worker) == supervisor for worker in workers), "a worker is not the supervisor's child"
    assert kinds(server) == dict.fromkeys(workers, "server")  # the supervisor never loaded the app
    summary = assert_one_run_per_tick_by(site, server, workers)
    assert sorted(server.started_pids()) == sorted(workers)
    print(f"uvicorn --workers 2: supervisor {supervisor} (no scheduler), schedulers in {sorted(workers)}; "
          f"{summary['ticks']} ticks each run once")


def test_daphne_starts_its_scheduler_at_boot(site: Site) -> None:
    server = site.spawn("daphne", [server_program("daphne"), "-b", "127.0.0.1", "-p", str(free_port()),
                                   "tests.django.fleet_asgi:application"])

    (started,) = wait_for_schedulers(server, 1, "Daphne to start a scheduler, with no request sent")
    assert started == server.pid
    assert_one_run_per_tick_by(site, server, {server.pid})


@pytest.mark.parametrize("lazy", [False, True], ids=["app-in-master", "lazy-apps"])
def test_uwsgi_starts_a_scheduler_in_each_worker_at_boot_and_none_in_its_master(site: Site, lazy: bool) -> None:
    command = [server_program("uwsgi"), "--http-socket", f"127.0.0.1:{free_port()}", "--module",
               "tests.django.fleet_wsgi:application", "--master", "--processes", "2", "--enable-threads",
               "--die-on-term", *(["--lazy-apps"] if lazy else [])]
    server = site.spawn("uwsgi", command)
    master = server.pid

    started = set(wait_for_schedulers(server, 2, "both workers to start a scheduler, with no request sent"))
    workers = pids(r"spawned uWSGI worker \d+ \(pid: (\d+)", server)
    assert started == workers and master not in workers and len(workers) == 2
    assert all(parent_pid(worker) == master for worker in workers), "a worker is not the master's child"
    # Without --lazy-apps the master loaded the app (and AppConfig.ready) before it forked the workers.
    assert kinds(server) == (dict.fromkeys(workers, "server") if lazy else {master: "server"})
    summary = assert_one_run_per_tick_by(site, server, workers)
    assert sorted(server.started_pids()) == sorted(workers)
    print(f"uWSGI {'--lazy-apps' if lazy else '(app loaded in the master)'}: master {master} (no scheduler), "
          f"schedulers in {sorted(workers)}; {summary['ticks']} ticks each run once")


def test_a_server_autostart_does_not_know_warns_at_its_first_request_that_it_runs_no_scheduler(site: Site) -> None:
    port = free_port()
    server = site.spawn("wsgiref", [sys.executable, str(HERE / "wsgiref_server.py"), str(port)])
    wait_until(lambda: server.assert_alive() or "wsgiref serving" in server.text(), timeout=20,
               what="the server to listen")
    assert re.search(UNKNOWN_SERVER, server.text()) is None  # it has served nothing yet

    assert http_get(f"http://127.0.0.1:{port}/pid/") == str(server.pid)
    assert http_get(f"http://127.0.0.1:{port}/pid/") == str(server.pid)

    assert pids(UNKNOWN_SERVER, server) == {server.pid}
    assert len(re.findall(UNKNOWN_SERVER, server.text())) == 1  # at the first request only
    assert "wsgiref_server.py" in server.text() and "mutexcron_django.runtime.start()" in server.text()

    def none_runs() -> None:
        assert server.started_pids() == [] and site.bodies() == []

    holds_for(none_runs, seconds=1.5)  # over a tick

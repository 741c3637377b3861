"""The example apps in 3 server processes against one Redis: FastAPI under ``uvicorn --workers 3``, Flask under
``gunicorn -w 3`` with the example's gunicorn.conf.py (its ``post_worker_init`` hook). Each worker starts one
scheduler (none in the supervisor or the master), each per-second tick runs exactly once across them, and the
``health/`` and ``metrics/`` endpoints answer (metrics summed across the workers' files). And ``flask run --debug``:
one scheduler, in the reloader's child, none in the parent that watches the files."""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from tests.contrib.web import BIN, EXAMPLES, LOGGING, WebServer, http_get, serving_pids
from tests.django.fleet_support import parent_pid
from tests.support import wait_until
from tests.support.servers import free_port

pytestmark = pytest.mark.fleet

WORKERS = 3
TICKS = 6
TOKEN = "a-health-token-of-the-test-" + uuid.uuid4().hex


@pytest.fixture
def ticks_list(redis_server_url: str, redis_prefix: str) -> Iterator[tuple[redis.Redis, str]]:
    client = redis.Redis.from_url(redis_server_url)
    yield client, f"{redis_prefix}ticks"
    client.close()


def environment(redis_url: str, redis_server_url: str, ticks_key: str, tmp_path: Path) -> dict[str, str]:
    metrics_dir = tmp_path / "prometheus"
    metrics_dir.mkdir()
    return {"MUTEXCRON_STORE": redis_url, "EXAMPLE_REDIS_URL": redis_server_url, "EXAMPLE_TICKS_KEY": ticks_key,
            "EXAMPLE_HEALTH_TOKEN": TOKEN, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}


def logging_config(tmp_path: Path) -> str:
    path = tmp_path / "logging.json"
    path.write_text(json.dumps(LOGGING))
    return str(path)


def server_binary(name: str) -> str:
    found = BIN / name
    if found.exists():
        return str(found)
    if shutil.which(name) is None:
        pytest.skip(f"{name} is not installed")
    return name


def check_the_fleet(server: WebServer, supervisor: int) -> str:
    """One scheduler per worker, none in ``supervisor``; each tick once; health/ and metrics/ answer."""
    workers = serving_pids(server, WORKERS)
    assert supervisor not in workers and all(parent_pid(pid) == supervisor for pid in workers)
    wait_until(lambda: len(server.started_pids()) >= WORKERS, timeout=20, what="every worker to start a scheduler")
    window = server.wait_for_ticks(TICKS)
    assert sorted(server.started_pids()) == sorted(workers), server.tail()
    summary = server.assert_each_tick_once(window)
    assert set(summary["runs_per_pid"]) <= workers  # type: ignore[call-overload]

    anonymous = http_get(server.url("/mutexcron/health/"))
    assert anonymous is not None and (anonymous.status, json.loads(anonymous.body)) == (200, {"status": "ok"})
    detailed = http_get(server.url("/mutexcron/health/"), headers={"Authorization": f"Bearer {TOKEN}"})
    assert detailed is not None and detailed.status == 200
    assert json.loads(detailed.body)["store"]["ok"] is True and json.loads(detailed.body)["jobs"] == 1

    page = http_get(server.url("/mutexcron/metrics/"))
    assert page is not None and page.status == 200 and page.content_type.startswith("text/plain")
    ran = sum(float(value) for value in re.findall(
        r'^mutexcron_job_runs_total\{job="app.record_tick",outcome="succeeded"\} (\S+)$', page.body, re.M))
    assert ran >= len(window), page.body[:2000]  # every worker's runs, summed from the multiprocess files
    return f"{summary['ticks']} ticks each run once; runs per worker pid {summary['runs_per_pid']}; metrics {ran:.0f}"


def serve_and_check(server: WebServer, label: str) -> None:
    """Check the fleet of ``server``, then stop it: a clean exit (every worker shut its scheduler down)."""
    try:
        summary = check_the_fleet(server, supervisor=server.process.pid)
        assert server.stop() == 0, server.tail()
        print(f"{label}: {summary}")
    finally:
        server.stop()
        print(server.tail())  # shown by pytest only if the test failed


def test_fastapi_example_under_uvicorn_with_three_workers_runs_each_tick_once(
        tmp_path: Path, redis_url: str, redis_server_url: str, ticks_list: tuple[redis.Redis, str]) -> None:
    port = free_port()
    command = [server_binary("uvicorn"), "--app-dir", str(EXAMPLES / "fastapi_app"), "app:app",
               "--workers", str(WORKERS), "--host", "127.0.0.1", "--port", str(port),
               "--log-config", logging_config(tmp_path)]
    serve_and_check(WebServer.spawn("uvicorn", command, port=port, tmp=tmp_path, ticks=ticks_list,
                                    env=environment(redis_url, redis_server_url, ticks_list[1], tmp_path)),
                    f"uvicorn --workers {WORKERS}")


def test_flask_example_under_gunicorn_with_three_workers_runs_each_tick_once(
        tmp_path: Path, redis_url: str, redis_server_url: str, ticks_list: tuple[redis.Redis, str]) -> None:
    port = free_port()
    config = EXAMPLES / "flask_app" / "gunicorn.conf.py"
    command = [server_binary("gunicorn"), "--chdir", str(EXAMPLES / "flask_app"), "-c", str(config), "app:app",
               "-w", str(WORKERS), "--bind", f"127.0.0.1:{port}", "--graceful-timeout", "20",
               "--log-config-json", logging_config(tmp_path), "--no-control-socket"]
    serve_and_check(WebServer.spawn("gunicorn", command, port=port, tmp=tmp_path, ticks=ticks_list,
                                    env=environment(redis_url, redis_server_url, ticks_list[1], tmp_path)),
                    f"gunicorn -w {WORKERS}")




def test_flask_run_debug_starts_one_scheduler_in_the_reloaders_child_only(
        tmp_path: Path, redis_url: str, redis_server_url: str, ticks_list: tuple[redis.Redis, str]) -> None:
    port = free_port()
    command = [server_binary("flask"), "--app", str(EXAMPLES / "flask_app" / "app.py"), "run", "--debug",
               "--host", "127.0.0.1", "--port", str(port)]
    server = WebServer.spawn("flask-run", command, port=port, tmp=tmp_path, ticks=ticks_list,
                             env=environment(redis_url, redis_server_url, ticks_list[1], tmp_path))
    try:
        # No request: the reloader's child starts its scheduler at once; judge the ticks from its first run on.
        wait_until(lambda: server.assert_alive() or server.entries(), timeout=30, what="the first tick to run")
        window = server.wait_for_ticks(TICKS)
        summary = server.assert_each_tick_once(window)
        [child] = serving_pids(server, 1)
        assert child != server.process.pid and parent_pid(child) == server.process.pid
        # Every tick ran in the child: the reloader's parent, which watches the files, runs no scheduler.
        assert set(summary["runs_per_pid"]) == {child}, summary  # type: ignore[call-overload]
        print(f"flask run --debug: {summary['ticks']} ticks each run once, all by the reloader's child {child}")
    finally:
        server.stop()
        print(server.tail())  # shown by pytest only if the test failed

"""The lifespan, the router, the Flask extension and its blueprint in one process, on the memory store."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from flask import Flask
from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.testclient import TestClient

from docs.examples.minimal_store import SQLiteLockStore
from mutexcron import Registry, Scheduler
from mutexcron.contrib.flask import EXTENSION, MutexCron, blueprint
from mutexcron.contrib.starlette import lifespan, router
from tests.support import declare_job

TOKEN = "a-token-of-twenty-chars"


def scheduler() -> Scheduler:
    registry = Registry()
    declare_job(registry, spec="0 0 1 1 *")
    return Scheduler("memory://", registry=registry)


def test_the_lifespan_starts_the_scheduler_and_shuts_it_down_at_exit() -> None:
    running = scheduler()
    with TestClient(Starlette(lifespan=lifespan(running))):
        assert running.running
    assert not running.running


def test_the_apps_own_lifespan_runs_inside_and_its_state_reaches_requests() -> None:
    running, seen = scheduler(), []

    @asynccontextmanager
    async def own(app: Any) -> AsyncIterator[dict[str, str]]:
        seen.append(("enter", running.running))
        yield {"answer": "42"}
        seen.append(("exit", running.running))

    app = Starlette(lifespan=lifespan(running, own))
    with TestClient(app) as client:
        assert client.app_state["answer"] == "42"  # type: ignore[attr-defined]
    assert seen == [("enter", True), ("exit", True)] and not running.running


def test_nested_in_an_apps_lifespan_with_async_with() -> None:
    running = scheduler()

    async def nested() -> None:
        async with lifespan(running) as inside:
            assert inside is running and running.running
        assert not running.running

    anyio.run(nested)


def test_a_scheduler_already_running_is_left_running() -> None:
    running = scheduler()
    running.start()
    try:
        with TestClient(Starlette(lifespan=lifespan(running))):
            pass
        assert running.running
    finally:
        running.shutdown()


def test_the_router_health_shows_details_only_with_the_token() -> None:
    running = scheduler()
    app = Starlette(routes=[Mount("/mutexcron", router(running, health_token=TOKEN))], lifespan=lifespan(running))
    with TestClient(app) as client:
        anonymous = client.get("/mutexcron/health/")
        assert (anonymous.status_code, anonymous.json()) == (200, {"status": "ok"})
        wrong = client.get("/mutexcron/health/", headers={"Authorization": "Bearer wrong-token-of-twenty"})
        assert wrong.json() == {"status": "ok"}
        detailed = client.get("/mutexcron/health/", headers={"Authorization": f"Bearer {TOKEN}"}).json()
        assert detailed["jobs"] == 1 and detailed["store"]["ok"] is True


def test_the_router_metrics_are_404_while_off_and_served_when_on() -> None:
    running = scheduler()
    off = Starlette(routes=[Mount("/m", router(running))])
    on = Starlette(routes=[Mount("/m", router(running, metrics=True))])
    assert TestClient(off).get("/m/metrics/").status_code == 404
    page = TestClient(on).get("/m/metrics/")
    assert page.status_code == 200 and "mutexcron_job_runs_total" in page.text


def test_health_is_unavailable_with_a_fixed_body_when_no_report_can_be_made(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    running = Scheduler(SQLiteLockStore(str(tmp_path / "locks.db")), registry=Registry())  # no control plane
    reply = TestClient(Starlette(routes=[Mount("/m", router(running))])).get("/m/health/")
    assert (reply.status_code, reply.json()) == (503, {"status": "unavailable"})
    assert "no report" in caplog.text


def flask_app(**config: Any) -> Flask:
    app = Flask(__name__)
    app.config.update({"MUTEXCRON_STORE": "memory://", "MUTEXCRON_MODULES": [], **config})
    return app


def test_flask_starts_at_the_first_request_outside_the_reloader_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("WERKZEUG_RUN_MAIN", raising=False)
    app = flask_app()
    extension = MutexCron(app)
    app.register_blueprint(blueprint, url_prefix="/mutexcron")
    assert not extension.scheduler(app).running
    try:
        reply = app.test_client().get("/mutexcron/health/")
        assert reply.status_code == 200 and extension.scheduler(app).running
    finally:
        extension.stop(app)
    assert not extension.scheduler(app).running


def test_flask_starts_at_once_in_the_reloader_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WERKZEUG_RUN_MAIN", "true")
    app = flask_app()
    extension = MutexCron()
    extension.init_app(app)
    try:
        assert app.extensions[EXTENSION].scheduler().running
    finally:
        extension.stop(app)


def test_flask_without_autostart_starts_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WERKZEUG_RUN_MAIN", "true")
    app = flask_app(MUTEXCRON_AUTOSTART=False)
    extension = MutexCron(app)
    app.test_client().get("/")
    assert not extension.scheduler(app).running


def test_the_blueprint_without_the_extension_answers_503_with_fixed_bodies() -> None:
    app = Flask(__name__)
    app.register_blueprint(blueprint, url_prefix="/mutexcron")
    health = app.test_client().get("/mutexcron/health/")
    assert (health.status_code, json.loads(health.data)) == (503, {"status": "unavailable"})
    metrics = app.test_client().get("/mutexcron/metrics/")
    assert metrics.status_code == 503 and b"see the server's log" in metrics.data

"""MUTEXCRON["METRICS"] and ["TRACING"]: checked like the other settings, given to the app's scheduler, and
the metrics view of mutexcron_django.urls (tests/django/test_metrics_gunicorn.py: multiprocess mode)."""

from __future__ import annotations

import logging
import sys
import uuid
from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client, override_settings
from django.urls import reverse
from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from mutexcron import Outcome
from mutexcron.tasks import HandlerRegistry, TaskQueue, task_handler
from mutexcron_django import runtime
from mutexcron_django.conf import get_settings
from mutexcron_django.tasks.queue import reset_task_queue
from tests.django.jobhelpers import Declarations


def test_both_are_off_by_default() -> None:
    with override_settings(MUTEXCRON={}):
        conf = get_settings()
    assert (conf.metrics, conf.tracing) == (False, False)


@pytest.mark.parametrize("key", ["METRICS", "TRACING"])
@pytest.mark.parametrize("value", [1, "true", None])
def test_only_a_boolean(key: str, value: object) -> None:
    with override_settings(MUTEXCRON={key: value}), pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    assert str(raised.value).startswith(f"MUTEXCRON[{key!r}] must be True or False, not {value!r}")


@pytest.mark.parametrize(("key", "module", "extra"),
                         [("METRICS", "mutexcron.telemetry.metrics", "mutexcron[prometheus]"),
                          ("TRACING", "mutexcron.telemetry.tracing", "mutexcron[otel]")])
def test_on_without_its_extra_names_the_extra(monkeypatch: pytest.MonkeyPatch, key: str, module: str,
                                              extra: str) -> None:
    monkeypatch.setitem(sys.modules, module, None)  # the import fails as without the extra's library
    with override_settings(MUTEXCRON={key: True}), pytest.raises(ImproperlyConfigured) as raised:
        get_settings()
    assert str(raised.value).startswith(f"MUTEXCRON[{key!r}] = True needs ")
    assert f"pip install '{extra}'" in str(raised.value)


@pytest.mark.django_db
def test_the_apps_scheduler_gets_metrics_and_tracing(declare: Declarations) -> None:
    name = declare("@hourly", name=f"tests.telemetry.{uuid.uuid4().hex[:8]}")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://", "METRICS": True,
                                      "TRACING": True}):
        scheduler = runtime.build_scheduler()
    try:
        assert scheduler.run_now(name).outcome is Outcome.SUCCEEDED
    finally:
        scheduler.shutdown()
    assert REGISTRY.get_sample_value("mutexcron_job_runs_total", {"job": name, "outcome": "succeeded"}) == 1.0


@pytest.mark.parametrize("on", [True, False])
def test_the_apps_task_queue_gets_metrics_and_tracing(on: bool) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": on, "TRACING": on,
                                      "TASKS": {"BACKEND": "redis://127.0.0.1:1/0"}}):
        queue = get_settings().tasks.build_queue()  # connects to nothing
    try:
        assert (queue.telemetry.metrics, queue.telemetry.tracing) == (on, on)
    finally:
        queue.close()


# -- the view ------------------------------------------------------------------------------------------------


def test_the_view_serves_the_registry(client: Client) -> None:
    from mutexcron.telemetry.metrics import task_finished

    kind = f"view.{uuid.uuid4().hex[:8]}"
    task_finished(kind, "succeeded")
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True}):
        response = client.get(reverse("mutexcron:metrics"))
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    text = response.content.decode()
    assert "# TYPE mutexcron_job_runs_total counter" in text  # registered even before the first run
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(text) for s in family.samples}
    assert samples[("mutexcron_tasks_total", (("outcome", "succeeded"), ("task_type", kind)))] == 1.0


def test_the_view_serves_the_pending_tasks_from_a_process_that_never_scheduled_one(client: Client,
                                                                                   redis_url: str) -> None:
    """A web worker that only serves the scrape still reads the backend, so the series never comes and goes."""
    handlers = HandlerRegistry()
    kind = f"pending.{uuid.uuid4().hex[:8]}"
    task_handler(kind, registry=handlers)(lambda payload: None)
    producer = TaskQueue(redis_url, handlers=handlers)  # another process's queue, in effect: no metrics of its own
    try:
        producer.schedule(kind, 1, delay=timedelta(hours=1))
        producer.schedule(kind, 2, delay=timedelta(hours=2))
    finally:
        producer.close()
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True, "TASKS": {"BACKEND": redis_url}}):
        reset_task_queue()
        try:
            response = client.get(reverse("mutexcron:metrics"))
        finally:
            reset_task_queue()
    assert response.status_code == 200
    samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
               for family in text_string_to_metric_families(response.content.decode()) for s in family.samples}
    assert samples[("mutexcron_tasks_pending", (("task_type", kind),))] == 2.0


def test_the_view_speaks_openmetrics_when_asked(client: Client) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True}):
        response = client.get("/mutexcron/metrics/", HTTP_ACCEPT="application/openmetrics-text; version=1.0.0")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("application/openmetrics-text")
    assert response.content.decode().rstrip().endswith("# EOF")


def test_the_view_is_404_while_metrics_are_off(client: Client) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False}):
        response = client.get("/mutexcron/metrics/")
    assert response.status_code == 404
    assert response.content.decode() == "mutexcron metrics are off: set MUTEXCRON['METRICS'] = True\n"


def test_the_view_is_503_without_the_extra(client: Client, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "mutexcron.telemetry.metrics", None)
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True}):
        response = client.get("/mutexcron/metrics/")
    assert response.status_code == 503
    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert "pip install 'mutexcron[prometheus]'" in response.content.decode()


def test_the_view_is_503_with_a_fixed_text_for_a_bad_setting_whose_detail_is_logged(
        client: Client, caplog: pytest.LogCaptureFixture) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True, "STOER": "redis://cache.internal/0"}), \
            caplog.at_level(logging.ERROR, logger="mutexcron.django"):
        response = client.get("/mutexcron/metrics/")
    assert response.status_code == 503
    assert response.content.decode() == "mutexcron metrics are unavailable: the configuration has an error (see the " \
                                        "server's log)\n"
    assert "unknown key(s) ['STOER']" in caplog.text


def test_the_view_answers_get_only(client: Client) -> None:
    with override_settings(MUTEXCRON={"AUTOSTART": False, "METRICS": True}):
        assert client.post("/mutexcron/metrics/").status_code == 405

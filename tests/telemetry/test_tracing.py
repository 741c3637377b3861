"""OpenTelemetry spans (Scheduler(tracing=True), mutexcron.telemetry.tracing) read back through
the SDK's in-memory exporter.

The SDK's tracer provider is global and set once per process (the first test that needs it sets it); every
test uses job and task-type names of its own and reads only its own spans.
"""

from __future__ import annotations

import subprocess
import sys
import threading
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from mutexcron import Outcome, Registry, Scheduler, mutex_cron
from mutexcron.stores import LockStore
from mutexcron.telemetry.tracing import inject_trace_context, task_span
from tests.support import declare_job, span_exporter, unique_name, wait_until

EVERY_SECOND = "* * * * * *"


@pytest.fixture(scope="module")
def exporter() -> InMemorySpanExporter:
    """The in-memory exporter of the process's SDK provider (set once per process, before any test reads it)."""
    exporter: InMemorySpanExporter = span_exporter()
    return exporter


def spans(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


NewScheduler = Callable[..., Scheduler]


def test_one_span_per_run_with_its_attributes_none_for_skips(
    exporter: InMemorySpanExporter, memory_or_redis: str | LockStore, registry: Registry,
    new_scheduler: NewScheduler,
) -> None:
    job = declare_job(registry)
    first = new_scheduler(memory_or_redis, tracing=True)
    second = new_scheduler(memory_or_redis, "B", tracing=True)
    tick = datetime.now(UTC).replace(microsecond=0)

    ran = first.run_tick(job, tick)
    assert ran.outcome is Outcome.SUCCEEDED
    assert second.run_tick(job, tick).outcome is Outcome.SKIPPED_ALREADY_RAN

    (span,) = spans(exporter, f"mutexcron.job {job}")  # the skip made none
    assert dict(span.attributes or {}) == {
        "mutexcron.job": job,
        "mutexcron.fire_time": tick.isoformat(),
        "mutexcron.outcome": "succeeded",
        "mutexcron.token": ran.token,
        "mutexcron.instance": "A",
        "mutexcron.catch_up": False,
    }
    assert span.kind is SpanKind.INTERNAL and span.parent is None  # a scheduled run starts its own trace
    assert span.status.status_code is StatusCode.UNSET


def test_a_backfilled_runs_span_says_so(exporter: InMemorySpanExporter, registry: Registry,
                                         new_scheduler: NewScheduler) -> None:
    job = declare_job(registry)
    tick = datetime(2026, 1, 5, tzinfo=UTC)

    assert new_scheduler("memory://", tracing=True).backfill(job, tick, tick + timedelta(seconds=1)) == 1

    (span,) = spans(exporter, f"mutexcron.job {job}")
    attributes = dict(span.attributes or {})
    assert attributes["mutexcron.backfill"] is True and attributes["mutexcron.fire_time"] == tick.isoformat()


def test_a_failing_body_records_its_exception_and_sets_the_status_error(
    exporter: InMemorySpanExporter, registry: Registry, new_scheduler: NewScheduler
) -> None:
    job = unique_name()

    @mutex_cron(EVERY_SECOND, name=job, registry=registry)
    def boom() -> None:
        raise ValueError("no such customer")

    scheduler = new_scheduler("memory://", tracing=True)
    assert scheduler.run_now(job).outcome is Outcome.FAILED

    (span,) = spans(exporter, f"mutexcron.job {job}")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == "ValueError: no such customer"
    assert (span.attributes or {})["mutexcron.outcome"] == "failed"
    (event,) = span.events
    assert event.name == "exception"
    assert (event.attributes or {})["exception.type"] == "ValueError"
    assert (event.attributes or {})["exception.message"] == "no such customer"


def test_the_bodys_own_spans_are_children_of_the_run_span(
    exporter: InMemorySpanExporter, registry: Registry, new_scheduler: NewScheduler
) -> None:
    job = unique_name()
    inner = unique_name("inner")
    tracer = trace.get_tracer("tests")

    @mutex_cron(EVERY_SECOND, name=job, registry=registry)
    def body() -> None:
        with tracer.start_as_current_span(inner):
            pass

    scheduler = new_scheduler("memory://", tracing=True)
    scheduler.start()  # the trigger's worker thread, as in production
    wait_until(lambda: spans(exporter, f"mutexcron.job {job}"), timeout=5, what="a scheduled run's span")
    scheduler.shutdown()

    run = spans(exporter, f"mutexcron.job {job}")[0]
    child = next(s for s in spans(exporter, inner) if s.parent and s.parent.span_id == run.context.span_id)
    assert child.context.trace_id == run.context.trace_id


def test_tracing_and_metrics_together(exporter: InMemorySpanExporter, registry: Registry,
                                      new_scheduler: NewScheduler) -> None:
    from prometheus_client import REGISTRY

    job = declare_job(registry)
    scheduler = new_scheduler("memory://", metrics=True, tracing=True)
    scheduler.run_tick(job, datetime.now(UTC).replace(microsecond=0))
    assert len(spans(exporter, f"mutexcron.job {job}")) == 1
    assert REGISTRY.get_sample_value("mutexcron_job_runs_total", {"job": job, "outcome": "succeeded"}) == 1.0


# -- tasks ---------------------------------------------------------------------------------------------------


def test_a_task_span_is_a_child_of_the_span_current_at_schedule(exporter: InMemorySpanExporter) -> None:
    kind = unique_name("email")
    tracer = trace.get_tracer("tests")
    with tracer.start_as_current_span(unique_name("request")) as request:
        carrier = inject_trace_context()  # what schedule() keeps with the task
    assert set(carrier) >= {"traceparent"}
    assert carrier["traceparent"].split("-")[1] == format(request.get_span_context().trace_id, "032x")

    due = datetime(2026, 5, 1, 12, 0, tzinfo=UTC)

    def worker() -> None:  # another thread, as a worker would run it: nothing current there
        with task_span(kind, carrier, task_id="t-1", due=due, attempt=1):
            pass

    thread = threading.Thread(target=worker)
    thread.start()
    thread.join()

    (span,) = spans(exporter, f"mutexcron.task {kind}")
    assert span.parent is not None and span.parent.span_id == request.get_span_context().span_id
    assert span.context.trace_id == request.get_span_context().trace_id
    assert span.kind is SpanKind.CONSUMER
    assert dict(span.attributes or {}) == {"mutexcron.task_type": kind, "mutexcron.task_id": "t-1",
                                           "mutexcron.due": due.isoformat(), "mutexcron.attempt": 1,
                                           "mutexcron.outcome": "succeeded"}


def test_a_task_without_trace_context_starts_a_trace_and_records_its_exception(
    exporter: InMemorySpanExporter,
) -> None:
    kind = unique_name("report")
    assert inject_trace_context() == {}  # no span current: nothing to carry
    outer = trace.get_tracer("tests").start_as_current_span(unique_name("unrelated"))
    with outer, pytest.raises(KeyError), task_span(kind, {}):  # a root span, even inside another one
        raise KeyError("missing")

    (span,) = spans(exporter, f"mutexcron.task {kind}")
    assert span.parent is None
    assert span.status.status_code is StatusCode.ERROR
    assert (span.attributes or {})["mutexcron.outcome"] == "failed"
    assert [event.name for event in span.events] == ["exception"]


def test_inject_adds_to_a_carrier_it_is_given(exporter: InMemorySpanExporter) -> None:
    carrier = {"other": "kept"}
    with trace.get_tracer("tests").start_as_current_span(unique_name("request")):
        fields = inject_trace_context(carrier)
    assert carrier == {"other": "kept", **fields} and "traceparent" in fields


_NO_SDK = """
from opentelemetry import trace
from mutexcron import Registry, Scheduler, mutex_cron
from mutexcron.telemetry.tracing import task_span

registry, seen = Registry(), []
mutex_cron("0 6 * * *", name="quiet", registry=registry)(lambda: seen.append(trace.get_current_span()))
scheduler = Scheduler("memory://", registry=registry, tracing=True)
outer = trace.NonRecordingSpan(trace.SpanContext(1, 2, is_remote=False))
with trace.use_span(outer):
    print(scheduler.run_now("quiet").outcome)
    with task_span("email", {}) as span:
        print(span is trace.INVALID_SPAN, trace.get_current_span() is outer)
print(seen == [outer])
scheduler.shutdown()
"""


def test_without_an_sdk_no_span_is_started_and_the_callers_span_stays_current() -> None:
    """The API alone (no provider set): nothing to record, so the run costs no span and hides no parent."""
    done = subprocess.run([sys.executable, "-c", _NO_SDK], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["succeeded", "True", "True", "True"], done.stdout

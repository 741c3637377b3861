"""The telemetry part of the task contracts (``TaskQueue(metrics=, tracing=)``), mixed into
:class:`tests.tasks.contract.TaskQueueContract` and :class:`~tests.tasks.contract.TaskRecordStoreContract`,
so it runs on every backend and record store: the trace context travels with each task (the worker's span is
a child of the span of ``schedule()``), ``pending_counts()`` counts the waiting tasks per type, and a worker's
attempts move ``mutexcron_tasks_total`` and the lateness and duration histograms.

Spans and metrics are process-wide (the SDK's provider is set once per process, by
:func:`tests.support.span_exporter`; the metrics live in prometheus-client's REGISTRY), so every test uses
task types of its own (:func:`tests.support.unique_name`) and reads only their spans and samples.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind, StatusCode
from prometheus_client import REGISTRY

from mutexcron.tasks import NewTask, TaskQueue, TaskStatus
from mutexcron.tasks.model import encode_trace_context
from mutexcron.tasks.records.base import TaskRecordStore, Verdict
from tests.support import span_exporter, unique_name, wait_until

QUICK = timedelta(milliseconds=50)
TRACE = encode_trace_context({"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                              "tracestate": "vendor=opaque"})


def task_spans(task_type: str) -> list[ReadableSpan]:
    """The finished ``mutexcron.task <type>`` spans, in the order they ended."""
    return [span for span in span_exporter().get_finished_spans() if span.name == f"mutexcron.task {task_type}"]


def sample(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def waiting(counts: Mapping[str, int] | None, *task_types: str) -> dict[str, int]:
    """The counts of ``task_types`` (0 for a type absent from ``counts``)."""
    assert counts is not None
    return {task_type: counts.get(task_type, 0) for task_type in task_types}


class TaskTelemetryContract:
    """Telemetry of a TaskQueue on one backend (the rest of :class:`TaskQueueContract` provides the helpers)."""

    define: Callable[..., str]
    worker: Callable[..., TaskQueue]

    def test_a_task_runs_in_a_child_span_of_the_span_current_at_schedule_its_retry_too(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        span_exporter()
        inside: list[trace.SpanContext] = []

        def fail_once(payload: Any) -> None:
            inside.append(trace.get_current_span().get_span_context())
            if len(inside) == 1:
                raise ConnectionError("the first attempt fails")

        task_type = self.define(unique_name("contract.traced"), body=fail_once, max_attempts=2, backoff=QUICK)
        queue = self.worker(make_queue, tracing=True)
        with trace.get_tracer("tests").start_as_current_span(unique_name("request")) as request:
            task_id = queue.schedule(task_type, "traced")
        parent = request.get_span_context()
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")
        first, second = wait_until(lambda: len(found := task_spans(task_type)) == 2 and found, what="two spans")
        for span, attempt, outcome in ((first, 1, "failed"), (second, 2, "succeeded")):
            assert span.kind is SpanKind.CONSUMER
            assert span.parent is not None and span.parent.span_id == parent.span_id
            assert span.context is not None and span.context.trace_id == parent.trace_id
            attributes = dict(span.attributes or {})
            assert {key: attributes.get(key) for key in ("mutexcron.task_type", "mutexcron.task_id",
                                                         "mutexcron.attempt", "mutexcron.outcome")} == {
                "mutexcron.task_type": task_type, "mutexcron.task_id": task_id, "mutexcron.attempt": attempt,
                "mutexcron.outcome": outcome}
            assert isinstance(attributes.get("mutexcron.due"), str)
            datetime.fromisoformat(str(attributes["mutexcron.due"]))
        assert first.status.status_code is StatusCode.ERROR
        assert [event.name for event in first.events] == ["exception"]
        assert second.status.status_code is StatusCode.UNSET
        assert first.context is not None and second.context is not None
        assert [context.span_id for context in inside] == [first.context.span_id, second.context.span_id]

    def test_a_task_scheduled_without_a_current_span_runs_in_a_root_span(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        span_exporter()
        task_type = self.define(unique_name("contract.untraced"))
        queue = self.worker(make_queue, tracing=True)
        assert not trace.get_current_span().get_span_context().is_valid
        task_id = queue.schedule(task_type, "no parent")
        (span,) = wait_until(lambda: task_spans(task_type), what="the task's span")
        assert span.parent is None
        assert dict(span.attributes or {})["mutexcron.task_id"] == task_id
        untraced = make_queue()  # tracing off: nothing is carried, and nothing is traced
        with trace.get_tracer("tests").start_as_current_span(unique_name("request")):
            other = untraced.schedule(task_type, "not carried")
        wait_until(lambda: queue.status(other) == TaskStatus.SUCCEEDED, what="status succeeded")
        both = wait_until(lambda: len(found := task_spans(task_type)) == 2 and found, what="the second span")
        assert [span.parent for span in both] == [None, None]

    def test_pending_counts_count_the_scheduled_tasks_per_type_until_they_are_claimed(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        later, now = self.define(unique_name("contract.later")), self.define(unique_name("contract.now"))
        queue = make_queue()
        if queue.backend.pending_counts() is None:
            pytest.skip(f"{queue.backend!r} cannot count its pending tasks cheaply (documented)")
        ids = queue.schedule_many([(later, n, {"delay": timedelta(hours=1)}) for n in range(3)])
        queue.schedule_many([(now, "due now"), (now, "due in a moment", {"delay": QUICK})])
        assert waiting(queue.backend.pending_counts(), later, now) == {later: 3, now: 2}  # due but unclaimed too
        assert queue.cancel(ids[0])
        assert waiting(queue.backend.pending_counts(), later, now) == {later: 2, now: 2}
        self.worker(make_queue, now)
        wait_until(lambda: waiting(queue.backend.pending_counts(), later, now) == {later: 2, now: 0},
                   what="the due tasks to leave the count once run")

    def test_with_metrics_every_attempt_is_counted_with_its_lateness_and_duration_and_pending_is_served(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        failures = Counter[str]()

        def flaky(payload: str) -> None:
            failures[payload] += 1
            if failures[payload] == 1:
                raise ConnectionError("try again")

        def broken(payload: Any) -> None:
            raise ValueError("never works")

        task_type = self.define(unique_name("contract.counted"), body=flaky, max_attempts=3, backoff=QUICK)
        failing = self.define(unique_name("contract.failing"), body=broken, max_attempts=1)
        queue = self.worker(make_queue, metrics=True)
        producer = make_queue(metrics=True)  # a second queue on the same tasks: still counted once
        done = producer.schedule(task_type, "flaky")
        gone = producer.schedule(failing, "broken")
        wait_until(lambda: queue.status(done) == TaskStatus.SUCCEEDED, what="status succeeded")
        wait_until(lambda: queue.status(gone) == TaskStatus.FAILED, what="status failed")
        assert {outcome: sample("mutexcron_tasks_total", task_type=task_type, outcome=outcome)
                for outcome in ("succeeded", "retrying", "failed")} == {"succeeded": 1, "retrying": 1, "failed": 0}
        assert sample("mutexcron_tasks_total", task_type=failing, outcome="failed") == 1
        for name in ("mutexcron_task_lateness_seconds_count", "mutexcron_task_duration_seconds_count"):
            assert sample(name, task_type=task_type) == 2
            assert sample(name, task_type=failing) == 1
        assert sample("mutexcron_task_lateness_seconds_sum", task_type=task_type) < 30
        assert sample("mutexcron_task_duration_seconds_sum", task_type=task_type) < 30

        if queue.backend.pending_counts() is None:
            assert REGISTRY.get_sample_value("mutexcron_tasks_pending", {"task_type": task_type}) is None
            return
        queue.stop()
        producer.schedule_many([(task_type, n, {"delay": timedelta(hours=1)}) for n in range(2)])
        assert sample("mutexcron_tasks_pending", task_type=task_type) == 2
        queue.close()
        assert sample("mutexcron_tasks_pending", task_type=task_type) == 2  # the producer still serves them
        producer.close()
        assert REGISTRY.get_sample_value("mutexcron_tasks_pending", {"task_type": task_type}) is None


class RecordStoreTelemetryContract:
    """What a task record store keeps for the telemetry: the trace context, and its count of waiting records."""

    def test_a_record_keeps_its_trace_context_for_retry(self, marks: TaskRecordStore) -> None:
        marks.create([NewTask("traced", "t", '"p"', datetime.now(UTC), trace_context=TRACE),
                      NewTask("plain", "t", '"p"', datetime.now(UTC))])
        assert marks.claim("traced", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.finish("traced", gen=1, status=TaskStatus.FAILED, error="boom")
        assert marks.reopen("traced", gen=1, new_gen=2, run_at=datetime.now(UTC))
        traced, plain = marks.get("traced"), marks.get("plain")
        assert traced is not None and traced.trace_context == TRACE
        assert plain is not None and plain.trace_context is None
        assert marks.create([NewTask("traced", "t", '"p"', datetime.now(UTC))]) == set()  # a live record is kept
        again = marks.get("traced")
        assert again is not None and again.trace_context == TRACE

    def test_pending_counts_count_the_scheduled_records_per_type(self, marks: TaskRecordStore) -> None:
        first, second = unique_name("records.first"), unique_name("records.second")
        if marks.pending_counts() is None:
            pytest.skip(f"{marks!r} cannot count its scheduled records cheaply (documented)")
        now = datetime.now(UTC)
        marks.create([NewTask(f"{first}-{n}", first, '"p"', now) for n in range(3)]
                     + [NewTask(f"{second}-0", second, '"p"', now)])
        assert waiting(marks.pending_counts(), first, second) == {first: 3, second: 1}
        assert marks.claim(f"{first}-0", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.cancel(f"{first}-1")
        assert waiting(marks.pending_counts(), first, second) == {first: 1, second: 1}
        assert marks.reschedule(f"{first}-0", gen=1, new_gen=2, run_at=now, error="retry")
        assert waiting(marks.pending_counts(), first, second) == {first: 2, second: 1}

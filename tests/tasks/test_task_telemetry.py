"""``TaskQueue(metrics=, tracing=)``: its options and the trace context a task carries (checked and bounded).
A missing extra: tests/telemetry/test_metrics.py; what every backend does with them:
tests/tasks/telemetry_contract.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest

from mutexcron.errors import StoreConfigError
from mutexcron.tasks import NewTask, PayloadError, TaskQueue
from mutexcron.tasks.model import MAX_TRACE_CONTEXT_CHARS, decode_trace_context, encode_trace_context

TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
NOWHERE = "redis://127.0.0.1:1/0"  # building a queue connects to nothing


@pytest.mark.parametrize("value", [1, "yes", None])
def test_metrics_and_tracing_must_be_booleans(value: object) -> None:
    for option in ("metrics", "tracing"):
        with pytest.raises(StoreConfigError, match=f"TaskQueue {option} must be True or False"):
            TaskQueue(NOWHERE, **{option: value})  # type: ignore[arg-type]


def test_without_tracing_a_task_carries_no_trace_context() -> None:
    queue = TaskQueue(NOWHERE)
    try:
        assert queue.trace_context() is None
    finally:
        queue.close()


def test_a_trace_context_is_kept_as_compact_json_traceparent_and_tracestate_first() -> None:
    text = encode_trace_context({"baggage": "user=1", "tracestate": "a=b", "traceparent": TRACEPARENT})
    assert text is not None and list(json.loads(text)) == ["traceparent", "tracestate", "baggage"]
    assert decode_trace_context(text) == {"traceparent": TRACEPARENT, "tracestate": "a=b", "baggage": "user=1"}
    assert encode_trace_context({}) is None and encode_trace_context(None) is None


def test_a_trace_context_is_bounded_and_what_is_not_header_text_is_dropped() -> None:
    carrier = {"traceparent": TRACEPARENT, "tracestate": "v=" + "x" * 500, "baggage": "b" * 900,
               "bad\nkey": "1", "other": "é", "k" * 65: "long key", "empty": ""}
    text = encode_trace_context(carrier)
    assert text is not None and len(text) <= MAX_TRACE_CONTEXT_CHARS
    assert set(json.loads(text)) == {"traceparent", "tracestate"}  # the baggage did not fit; the rest is invalid
    assert encode_trace_context({"baggage": "b" * 2000}) is None
    for stored in ("not json", "[1]", '{"a": 1}', "x" * (MAX_TRACE_CONTEXT_CHARS + 1), None, 7):
        assert decode_trace_context(stored) is None


def test_a_new_task_refuses_a_trace_context_over_the_bound() -> None:
    with pytest.raises(PayloadError, match="trace_context"):
        NewTask("a", "t", "1", datetime.now(UTC), trace_context="x" * (MAX_TRACE_CONTEXT_CHARS + 1))

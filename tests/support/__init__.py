"""Helpers shared by the test modules."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal, TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T | Literal[False] | None], timeout: float = 5.0, what: str = "",
               interval: float = 0.02) -> T:
    """Poll ``predicate`` until it returns something truthy (returned) or ``timeout`` seconds pass (fail)."""
    deadline = time.monotonic() + timeout
    while True:
        result = predicate()
        if result:
            return result
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:.1f}s waiting for {what or predicate}")
        time.sleep(interval)


def unique_name(prefix: str = "job") -> str:
    """A name no other test uses (for what lives in a process-wide registry: metrics, spans)."""
    return f"{prefix}.{uuid.uuid4().hex[:10]}"


def declare_job(registry: Any, body: Callable[..., Any] = lambda: None, *, spec: str = "* * * * * *",
                **options: Any) -> str:
    """Declare ``body`` in ``registry`` under a name of its own (``unique_name()``); returns the name."""
    from mutexcron import mutex_cron

    name = unique_name()
    mutex_cron(spec, name=name, registry=registry, **options)(body)
    return name


def next_whole_second_after(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


def whole_seconds(first: datetime, last: datetime) -> list[datetime]:
    """Every whole second from ``first`` to ``last`` inclusive: the fire times of ``* * * * * *``."""
    count = int((last - first).total_seconds()) + 1
    return [first + timedelta(seconds=n) for n in range(max(0, count))]


# -- ledgers: how the processes of the multi-process tests report what they did ---------------------------


class Ledger:
    """An append-only JSON-lines file that belongs to one process alone: each line is one write() of an
    O_APPEND file, fsync'ed, so no line is lost, split or merged. Every line carries ``identity`` and
    ``"at"`` (``stamp()`` when it was written)."""

    def __init__(self, path: Path, stamp: Callable[[], object], **identity: str) -> None:
        self.identity = identity
        self._stamp = stamp
        self._fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._lock = threading.Lock()

    def write(self, event: str, **fields: Any) -> None:
        entry = {"event": event, **self.identity, "at": self._stamp(), **fields}
        line = (json.dumps(entry) + "\n").encode()
        with self._lock:
            written = os.write(self._fd, line)  # unbuffered: nothing to flush but the kernel's cache
            assert written == len(line), f"short write to the ledger: {written} of {len(line)} bytes"
            os.fsync(self._fd)

    def close(self) -> None:
        os.close(self._fd)


def read_ledger(path: Path) -> list[dict[str, Any]]:
    """The complete lines of a ledger, parsed (a line still being written has no newline yet)."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines(keepends=True) if line.endswith("\n")]


_span_exporter: Any = None


def span_exporter() -> Any:
    """The in-memory exporter (``InMemorySpanExporter``) of this process's OpenTelemetry SDK provider, which
    the first caller sets as the global one (it can be set once per process): every test reads only the spans
    of names of its own."""
    global _span_exporter
    if _span_exporter is None:
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

        provider = TracerProvider()
        exporter = InMemorySpanExporter()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        trace.set_tracer_provider(provider)
        assert trace.get_tracer_provider() is provider, "another tracer provider was set before these tests"
        _span_exporter = exporter
    return _span_exporter


class FireThreads:
    """A contract mixin for schedulers run on ``self.store``: ``each_fire`` is their fire_context, which calls
    ``thread_finished`` after each fire (a store whose connections are per thread closes the thread's own)."""

    def thread_finished(self) -> None:
        """Overridden by a store whose connections are per thread (see ControlSchedulerContract)."""

    @contextmanager
    def each_fire(self) -> Iterator[None]:
        try:
            yield
        finally:
            self.thread_finished()

    def in_thread(self, target: Callable[[], object]) -> threading.Thread:
        """``target`` run in a thread of its own, started; ``thread_finished`` is called at its end."""
        def run() -> None:
            with self.each_fire():
                target()

        thread = threading.Thread(target=run)
        thread.start()
        return thread

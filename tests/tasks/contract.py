"""The task queue contract: TaskQueue behaviour every task backend must show (Redis, RabbitMQ, SQL, ...).

Subclass :class:`TaskQueueContract` in a backend's own test file and give it a ``queue_url`` fixture
(a URL whose tasks are this test's alone); override ``queue_options`` for extra ``TaskQueue`` arguments
(``{"cancel_store": …}``) and ``unreachable_url`` for a URL of a server that is not there::

    class TestMyBackend(TaskQueueContract):
        @pytest.fixture
        def queue_url(self, my_backend_url: str) -> str:
            return my_backend_url

Nothing here knows a backend. Handlers run in real worker threads (``TaskQueue.start``) and record what
they ran; tests wait for the records by polling with a deadline, never with a bare sleep, except to check
that something does *not* happen. Timing bounds are generous (a due task starts "within 0.5 s"): precise
numbers belong to benchmarks.
"""

from __future__ import annotations

import itertools
import logging
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar
from urllib.parse import urlsplit

import pytest

from mutexcron.errors import StoreUnavailable
from mutexcron.tasks import HandlerRegistry, NewTask, PayloadError, TaskQueue, TaskStatus, UnknownTaskType, task_handler
from mutexcron.tasks.records.base import Claim, RecordDataError, TaskRecordStore, Verdict
from tests.support import wait_until
from tests.tasks.task_id_contract import RecordIdContract, TaskIdContract
from tests.tasks.telemetry_contract import RecordStoreTelemetryContract, TaskTelemetryContract

T = TypeVar("T")
# Seconds: a due task must have started by then. It typically starts within a few milliseconds, but CI runs two
# suites at once on two CPUs, where a task on the cluster can start over 0.5 s late. A worker that missed its
# wake-up would wait its max idle time (60 s on Redis and PostgreSQL) instead, far past this bound.
LATE = 1.0
EARLY = 0.03  # seconds: how much earlier than its due time a task may start (clock rounding to the ms)
QUICK = timedelta(milliseconds=50)


def due_time(queue: TaskQueue, task_id: str) -> float:
    """The task's due time (``time.time()`` scale) as schedule() computed it: lateness is measured from it."""
    info = queue.info(task_id)
    assert info is not None, f"task {task_id} is unknown"
    return info.run_at.timestamp()


@contextmanager
def queue_factory(
    handlers: HandlerRegistry, default_url: Any = None, **options: Any
) -> Iterator[Callable[..., TaskQueue]]:
    """``make(url=None, **more)``: TaskQueues with ``handlers`` and ``options`` (and ``more``: ``metrics=True``…),
    on ``url`` or ``default_url``; every one of them is closed (its worker stopped) when the block ends."""
    made: list[TaskQueue] = []

    def make(url: Any = None, **more: Any) -> TaskQueue:
        queue = TaskQueue(url or default_url, handlers=handlers, **{**options, **more})
        made.append(queue)
        return queue

    try:
        yield make
    finally:
        for queue in reversed(made):
            queue.close()


@dataclass(frozen=True)
class Run:
    task_type: str
    payload: Any
    at: float  # time.time() when the handler started


class Recorder:
    """A handler registry whose handlers record what they ran, in order; thread-safe."""

    def __init__(self, default_type: str) -> None:
        self.handlers = HandlerRegistry()
        self.default_type = default_type
        self._lock = threading.Lock()
        self._runs: list[Run] = []

    def define(self, task_type: str | None = None, body: Callable[[Any], Any] | None = None, **options: Any) -> str:
        """Register a recording handler for ``task_type`` (default: this recorder's); ``body`` runs after."""
        task_type = task_type or self.default_type

        def handler(payload: Any) -> None:
            with self._lock:
                self._runs.append(Run(task_type, payload, time.time()))
            if body is not None:
                body(payload)

        task_handler(task_type, registry=self.handlers, **options)(handler)
        return task_type

    def all(self, task_type: str | None = None) -> list[Run]:
        with self._lock:
            return [run for run in self._runs if task_type is None or run.task_type == task_type]

    def of(self, payload: Any) -> list[Run]:
        return [run for run in self.all() if run.payload == payload]

    def payloads(self, task_type: str | None = None) -> list[Any]:
        return [run.payload for run in self.all(task_type)]

    def wait_for(self, payload: Any, count: int = 1, timeout: float = 5.0) -> list[Run]:
        return wait_until(lambda: (found := self.of(payload)) and len(found) >= count and found,
                          timeout, f"{count} run(s) of {payload!r}")

    def at(self, payload: Any, timeout: float = 5.0) -> float:
        """When ``payload`` first started running (waits for it)."""
        return self.wait_for(payload, timeout=timeout)[0].at


class TaskQueueContract(TaskIdContract, TaskTelemetryContract):
    """Behaviour shared by every task backend (with its telemetry: :mod:`tests.tasks.telemetry_contract`, and
    the caller's task ids: :mod:`tests.tasks.task_id_contract`).
    The subclass provides the ``queue_url`` fixture."""

    handlers: HandlerRegistry
    runs: Recorder

    # -- hooks for the backend's test file ---------------------------------------------------------

    @pytest.fixture
    def queue_url(self) -> str:
        raise NotImplementedError("a TaskQueueContract subclass must define the queue_url fixture")

    @pytest.fixture
    def queue_options(self) -> dict[str, Any]:
        """Extra keyword arguments of TaskQueue (``cancel_store`` for RabbitMQ)."""
        return {}

    @pytest.fixture
    def unreachable_url(self) -> str | None:
        """A URL of this backend's kind where no server answers (None: the outage test is skipped)."""
        return None

    @pytest.fixture
    def make_queue(self, queue_url: str, queue_options: dict[str, Any]) -> Iterator[Callable[..., TaskQueue]]:
        """``make_queue()``: a TaskQueue on this test's backend with this test's handlers; closed afterwards."""
        with queue_factory(self.handlers, queue_url, **queue_options) as make:
            yield make

    @pytest.fixture(autouse=True)
    def _fresh_handlers(self) -> None:
        self.runs = Recorder("contract.task")
        self.handlers = self.runs.handlers

    # -- helpers -----------------------------------------------------------------------------------

    def define(self, task_type: str | None = None, body: Callable[[Any], Any] | None = None,
               **options: Any) -> str:
        """Register a handler that records each run (then calls ``body(payload)``, if given)."""
        return self.runs.define(task_type, body, **options)

    def worker(self, make_queue: Callable[..., TaskQueue], *types: str, prefetch: int = 10,
               **options: Any) -> TaskQueue:
        queue = make_queue(**options)
        queue.start(list(types) or None, prefetch=prefetch)
        return queue

    @staticmethod
    def wait_idle(worker: TaskQueue, task_type: str) -> None:
        """Return once ``worker`` is consuming and has gone back to waiting: it ran a probe task due now and
        settled it, so the next task reaches it through its wait (a wake-up or a due time), not its start-up,
        and a task scheduled before this call is the one it waits for."""
        probe = worker.schedule(task_type, f"idle probe {time.monotonic_ns()}")
        wait_until(lambda: worker.status(probe) == TaskStatus.SUCCEEDED, what="the worker to run a probe and wait")

    # -- scheduling ----------------------------------------------------------------------------------

    def test_schedule_returns_an_id_and_the_task_is_scheduled(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = make_queue()
        before = datetime.now(UTC)
        task_id = queue.schedule(task_type, {"to": "+33600000000", "text": "héllo"}, delay=timedelta(hours=1))
        assert isinstance(task_id, str) and task_id
        assert queue.status(task_id) == TaskStatus.SCHEDULED
        info = queue.info(task_id)
        assert info is not None
        assert (info.id, info.task_type, info.payload) == (task_id, task_type, {"to": "+33600000000", "text": "héllo"})
        assert (info.status, info.attempts, info.error) == (TaskStatus.SCHEDULED, 0, None)
        assert abs((info.run_at - (before + timedelta(hours=1))).total_seconds()) < 5

    def test_every_task_gets_its_own_id(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = make_queue()
        ids = [queue.schedule(task_type, n, delay=timedelta(hours=1)) for n in range(5)]
        ids += queue.schedule_many([(task_type, n, {"delay": timedelta(hours=1)}) for n in range(5)])
        assert len(set(ids)) == 10

    def test_a_naive_run_at_is_rejected(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        with pytest.raises(PayloadError, match="aware"):
            make_queue().schedule(task_type, 1, run_at=datetime.now() + timedelta(minutes=1))

    def test_run_at_and_delay_together_are_rejected(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        with pytest.raises(PayloadError, match="not both"):
            make_queue().schedule(task_type, 1, run_at=datetime.now(UTC), delay=timedelta(seconds=1))

    def test_an_invalid_task_type_is_rejected(self, make_queue: Callable[..., TaskQueue]) -> None:
        with pytest.raises(UnknownTaskType, match="invalid"):
            make_queue().schedule("not a valid type!", 1)

    def test_a_payload_that_is_not_json_is_rejected_and_nothing_of_the_batch_is_stored(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        with pytest.raises(PayloadError, match="JSON"):
            queue.schedule_many([(task_type, {"n": 1}), (task_type, {"when": datetime.now(UTC)})])
        with pytest.raises(PayloadError, match="JSON"):
            queue.schedule(task_type, {"n": float("nan")})
        queue.schedule(task_type, "marker", delay=timedelta(milliseconds=200))
        self.runs.wait_for("marker")
        time.sleep(0.1)
        assert self.runs.payloads() == ["marker"]

    def test_a_payload_round_trips_as_json(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        payload = {"text": "héllo ✓", "n": 1.5, "big": 2**53, "list": [1, None, True, "x"], "nested": {"a": []}}
        self.worker(make_queue).schedule(task_type, payload)
        self.runs.wait_for(payload)

    # -- running -------------------------------------------------------------------------------------

    def test_a_due_task_runs_once_and_then_is_succeeded(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, {"n": 1})
        self.runs.wait_for({"n": 1})
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")
        info = queue.info(task_id)
        assert info is not None and info.attempts == 1 and info.error is None
        time.sleep(0.3)
        assert len(self.runs.of({"n": 1})) == 1

    def test_a_run_at_in_the_past_runs_at_once(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        queue.schedule(task_type, "past", run_at=datetime.now(UTC) - timedelta(hours=1))
        scheduled_at = time.time()  # after schedule() returned: a process's first one may declare a topology
        (run,) = self.runs.wait_for("past")
        assert run.at - scheduled_at < LATE, f"started {run.at - scheduled_at:.3f}s after schedule() returned"

    def test_delay_postpones_the_task(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        due = time.time() + 0.6
        queue.schedule(task_type, "later", delay=timedelta(seconds=0.6))
        time.sleep(0.3)  # an idle window: a worker that ignored the delay has run it by now
        # Judged by when the handler started, not by whether it has run yet: on a loaded machine the sleep may
        # itself last past the due time.
        assert [run.at - due for run in self.runs.of("later") if run.at < due - EARLY] == []
        (run,) = self.runs.wait_for("later")
        assert due - EARLY <= run.at < due + LATE, f"started {run.at - due:+.3f}s from its due time"

    def test_run_at_postpones_the_task(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        run_at = datetime.now(UTC) + timedelta(seconds=0.6)
        queue.schedule(task_type, "at", run_at=run_at)
        (run,) = self.runs.wait_for("at")
        due = run_at.timestamp()
        assert due - EARLY <= run.at < due + LATE, f"started {run.at - due:+.3f}s from its due time"

    def test_a_worker_starts_a_due_task_promptly(self, make_queue: Callable[..., TaskQueue]) -> None:
        """The worker sleeps until the next due time and is woken for sooner ones: no polling interval."""
        task_type = self.define()
        queue = self.worker(make_queue)
        self.wait_idle(queue, task_type)
        now = time.time()
        delays = [0.15 + 0.1 * n for n in range(8)]
        queue.schedule_many([(task_type, n, {"delay": timedelta(seconds=d)}) for n, d in enumerate(delays)])
        lateness = []
        for n, delay in enumerate(delays):
            (run,) = self.runs.wait_for(n)
            lateness.append(run.at - (now + delay))
        print(f"lateness: {', '.join(f'{x * 1000:.1f}' for x in lateness)} ms")
        assert min(lateness) > -EARLY and max(lateness) < LATE

    def test_a_sleeping_worker_wakes_for_a_sooner_task(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        queue.schedule(task_type, "in a minute", delay=timedelta(minutes=1))
        self.wait_idle(queue, task_type)  # the worker now sleeps until that task is due
        due = time.time() + 0.3
        queue.schedule(task_type, "sooner", delay=timedelta(seconds=0.3))
        (run,) = self.runs.wait_for("sooner")
        assert due - EARLY <= run.at < due + LATE

    def test_a_task_scheduled_by_another_instance_wakes_the_worker(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        worker = self.worker(make_queue)
        producer = make_queue()
        self.wait_idle(worker, task_type)
        due = time.time() + 0.2
        producer.schedule(task_type, "from elsewhere", delay=timedelta(seconds=0.2))
        (run,) = self.runs.wait_for("from elsewhere")
        assert run.at < due + LATE

    def test_there_is_no_head_of_line_blocking(self, make_queue: Callable[..., TaskQueue]) -> None:
        """A 0.5 s task scheduled after a 5 s task runs at about 0.5 s."""
        task_type = self.define()
        queue = self.worker(make_queue)
        queue.schedule(task_type, "5 s", delay=timedelta(seconds=5))
        short = queue.schedule(task_type, "0.5 s", delay=timedelta(seconds=0.5))
        due = due_time(queue, short)  # from its own schedule() call: the first one may declare queues
        (run,) = self.runs.wait_for("0.5 s")
        assert due - EARLY <= run.at < due + LATE
        assert self.runs.of("5 s") == []

    def test_a_worker_started_late_runs_the_tasks_that_became_due(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        queue = make_queue()
        queue.schedule_many([(task_type, n, {"delay": timedelta(milliseconds=50)}) for n in range(3)])
        time.sleep(0.2)
        queue.start()
        for n in range(3):
            self.runs.wait_for(n)

    def test_a_worker_runs_only_the_task_types_it_was_given(self, make_queue: Callable[..., TaskQueue]) -> None:
        mine, other = self.define("contract.mine"), self.define("contract.other")
        queue = self.worker(make_queue, mine)
        other_id = queue.schedule(other, "other")
        queue.schedule(mine, "mine")
        self.runs.wait_for("mine")
        time.sleep(0.2)
        assert self.runs.of("other") == []
        assert queue.status(other_id) == TaskStatus.SCHEDULED

    def test_a_worker_runs_every_registered_type_by_default(self, make_queue: Callable[..., TaskQueue]) -> None:
        first, second = self.define("contract.first"), self.define("contract.second")
        queue = self.worker(make_queue)
        queue.schedule(first, 1)
        queue.schedule(second, 2)
        self.runs.wait_for(1)
        self.runs.wait_for(2)

    def test_run_worker_with_an_unknown_task_type_raises_a_clear_error(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        self.define("contract.known")
        with pytest.raises(UnknownTaskType, match=r"no handler for task type 'contract\.unknown'.*contract\.known"):
            make_queue().run_worker(["contract.unknown"])

    def test_run_worker_without_any_handler_raises(self, make_queue: Callable[..., TaskQueue]) -> None:
        with pytest.raises(UnknownTaskType, match="no task types"):
            make_queue().run_worker()

    def test_stop_returns_promptly_when_the_worker_is_idle(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        queue.schedule(task_type, "in an hour", delay=timedelta(hours=1))
        self.wait_idle(queue, task_type)
        started = time.monotonic()
        queue.stop()
        assert time.monotonic() - started < 1.0

    def test_stop_lets_the_running_task_finish(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define(body=lambda payload: time.sleep(0.4))
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "slow")
        self.runs.wait_for("slow")
        queue.stop()
        assert queue.status(task_id) == TaskStatus.SUCCEEDED

    # -- cancelling ------------------------------------------------------------------------------------

    def test_cancel_before_due_returns_true_and_the_task_never_runs(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        # Due in 1.5 s: the cancel comes well before, even on a loaded machine (a worker runs the task once due).
        task_id = queue.schedule(task_type, "cancelled", delay=timedelta(milliseconds=1500))
        assert queue.cancel(task_id) is True
        assert queue.status(task_id) == TaskStatus.CANCELLED
        queue.schedule(task_type, "marker", delay=timedelta(milliseconds=1700))  # due after the cancelled one
        self.runs.wait_for("marker")
        assert self.runs.payloads() == ["marker"]
        assert queue.status(task_id) == TaskStatus.CANCELLED

    def test_cancel_after_the_task_ran_returns_false(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "done")
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")
        assert queue.cancel(task_id) is False
        assert queue.status(task_id) == TaskStatus.SUCCEEDED

    def test_cancel_of_a_running_task_returns_false(self, make_queue: Callable[..., TaskQueue]) -> None:
        release = threading.Event()
        task_type = self.define(body=lambda payload: release.wait(10))
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "running")
        try:
            self.runs.wait_for("running")
            assert queue.status(task_id) == TaskStatus.RUNNING
            assert queue.cancel(task_id) is False
        finally:
            release.set()
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")

    def test_cancel_twice_returns_false_the_second_time(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = make_queue()
        task_id = queue.schedule(task_type, 1, delay=timedelta(hours=1))
        assert queue.cancel(task_id) is True
        assert queue.cancel(task_id) is False
        assert queue.status(task_id) == TaskStatus.CANCELLED

    def test_cancel_of_an_unknown_id_returns_false(self, make_queue: Callable[..., TaskQueue]) -> None:
        assert make_queue().cancel("0123456789abcdef0123456789abcdef") is False

    def test_status_of_an_unknown_id_is_unknown(self, make_queue: Callable[..., TaskQueue]) -> None:
        queue = make_queue()
        assert queue.status("0123456789abcdef0123456789abcdef") == TaskStatus.UNKNOWN
        assert queue.info("0123456789abcdef0123456789abcdef") is None

    def test_a_cancel_racing_the_due_time_either_cancels_or_the_task_runs_never_both(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define(body=lambda payload: time.sleep(0.001))
        queue = self.worker(make_queue)
        canceller = make_queue()
        count = 300
        due = datetime.now(UTC) + timedelta(milliseconds=300)
        ids = queue.schedule_many([(task_type, n, {"run_at": due}) for n in range(count)])
        order = list(enumerate(ids))
        random.Random(7).shuffle(order)
        cancelled: dict[int, bool] = {}

        def cancel_all() -> None:
            time.sleep(max(0.0, due.timestamp() - time.time() - 0.01))  # start just before they are due
            for n, task_id in order:
                cancelled[n] = canceller.cancel(task_id)

        thread = threading.Thread(target=cancel_all)
        thread.start()
        thread.join(30)
        assert len(cancelled) == count
        not_cancelled = [n for n, done in cancelled.items() if not done]
        wait_until(lambda: set(not_cancelled) <= set(self.runs.payloads()), timeout=15,
                   what="every task that was not cancelled to run")
        time.sleep(0.2)
        runs = Counter(self.runs.payloads())
        assert [n for n, done in cancelled.items() if done and runs[n]] == [], "cancelled tasks that ran"
        assert [n for n in not_cancelled if runs[n] != 1] == [], "tasks not run exactly once"
        for n, task_id in enumerate(ids[:50]):
            expected = TaskStatus.CANCELLED if cancelled[n] else TaskStatus.SUCCEEDED
            wait_until(lambda task_id=task_id, expected=expected: queue.status(task_id) == expected,
                       what=f"status of task {n} to be {expected}")
        print(f"{count - len(not_cancelled)} cancelled, {len(not_cancelled)} ran")

    # -- failures and retries ----------------------------------------------------------------------

    def test_a_failing_task_is_retried_with_exponential_backoff_then_failed_with_its_error(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        def fail(payload: Any) -> None:
            raise ValueError(f"cannot send to {payload}")

        task_type = self.define(body=fail, max_attempts=4, backoff=QUICK)
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "nowhere")
        runs = self.runs.wait_for("nowhere", count=4)
        wait_until(lambda: queue.status(task_id) == TaskStatus.FAILED, what="status failed")
        gaps = [later.at - earlier.at for earlier, later in itertools.pairwise(runs)]
        print(f"gaps between attempts: {', '.join(f'{gap * 1000:.0f}' for gap in gaps)} ms")
        for n, gap in enumerate(gaps):
            expected = QUICK.total_seconds() * 2**n  # 50, 100, 200 ms
            assert expected - EARLY <= gap < expected + LATE, f"gap {n + 1} was {gap:.3f}s, expected {expected}s"
        info = queue.info(task_id)
        assert info is not None
        assert info.attempts == 4
        assert info.error is not None and "ValueError: cannot send to nowhere" in info.error
        time.sleep(0.5)
        assert len(self.runs.of("nowhere")) == 4

    def test_a_task_that_fails_then_succeeds_is_succeeded(self, make_queue: Callable[..., TaskQueue]) -> None:
        failures = Counter[str]()

        def flaky(payload: str) -> None:
            failures[payload] += 1
            if failures[payload] <= 2:
                raise ConnectionError("try again")

        task_type = self.define(body=flaky, max_attempts=5, backoff=QUICK)
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "flaky")
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")
        info = queue.info(task_id)
        assert info is not None and info.attempts == 3
        assert len(self.runs.of("flaky")) == 3

    def test_retry_runs_a_failed_task_again_with_its_attempts_starting_over(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        broken = threading.Event()
        broken.set()

        def body(payload: Any) -> None:
            if broken.is_set():
                raise RuntimeError("the SMS gateway is down")

        task_type = self.define(body=body, max_attempts=2, backoff=QUICK)
        queue = self.worker(make_queue)
        task_id = queue.schedule(task_type, "sms")
        wait_until(lambda: queue.status(task_id) == TaskStatus.FAILED, what="status failed")
        assert len(self.runs.of("sms")) == 2
        broken.clear()
        assert queue.retry(task_id) is True
        self.runs.wait_for("sms", count=3)
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="status succeeded")
        info = queue.info(task_id)
        assert info is not None and info.attempts == 1
        assert queue.retry(task_id) is False

    def test_retry_of_a_task_that_is_not_failed_returns_false(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = make_queue()
        task_id = queue.schedule(task_type, 1, delay=timedelta(hours=1))
        assert queue.retry(task_id) is False
        assert queue.status(task_id) == TaskStatus.SCHEDULED
        assert queue.retry("0123456789abcdef0123456789abcdef") is False

    # -- volume ------------------------------------------------------------------------------------

    def test_schedule_many_of_1000_tasks_runs_each_exactly_once_across_two_workers(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        self.worker(make_queue)
        self.worker(make_queue)
        producer = make_queue()
        started = time.monotonic()
        ids = producer.schedule_many(
            [(task_type, n, {"delay": timedelta(milliseconds=n % 200)}) for n in range(1000)]
        )
        print(f"scheduled 1000 tasks in {time.monotonic() - started:.3f}s")
        assert len(set(ids)) == 1000
        wait_until(lambda: len(set(self.runs.payloads())) == 1000, timeout=60, what="1000 distinct tasks to run")
        time.sleep(0.3)
        runs = Counter(self.runs.payloads())
        assert [n for n, times in runs.items() if times != 1] == []
        assert set(runs) == set(range(1000))
        for task_id in random.Random(3).sample(ids, 20):
            wait_until(lambda task_id=task_id: producer.status(task_id) == TaskStatus.SUCCEEDED,
                       what="status succeeded")

    def test_a_stopping_worker_gives_back_the_tasks_it_took_but_did_not_start(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        """stop() finishes the running task; the others it had claimed or prefetched are due again, unrun."""
        started, release = threading.Event(), threading.Event()

        def body(payload: Any) -> None:
            started.set()
            release.wait(10)

        task_type = self.define(body=body)
        queue = make_queue()
        now = datetime.now(UTC)
        ids = queue.schedule_many([(task_type, n, {"run_at": now - timedelta(seconds=5 - n)}) for n in range(5)])
        queue.start(prefetch=10)
        assert started.wait(5)
        stopping = threading.Thread(target=queue.stop)
        stopping.start()
        wait_until(queue._stop.is_set, what="stop() to be asked while the first task runs")
        release.set()
        stopping.join(10)
        assert self.runs.payloads() == [0]
        assert queue.status(ids[0]) == TaskStatus.SUCCEEDED
        for task_id in ids[1:]:
            info = queue.info(task_id)
            assert info is not None and (info.status, info.attempts) == (TaskStatus.SCHEDULED, 0)
        make_queue().start()
        wait_until(lambda: sorted(self.runs.payloads()) == [0, 1, 2, 3, 4], what="the rest to run")

    # -- outages -------------------------------------------------------------------------------------

    def test_an_unreachable_backend_raises_store_unavailable(
        self, unreachable_url: str | None, queue_options: dict[str, Any]
    ) -> None:
        if unreachable_url is None:
            pytest.skip("this backend's test file gives no unreachable_url")
        task_type = self.define()
        queue = TaskQueue(unreachable_url, handlers=self.handlers, **queue_options)
        try:
            with pytest.raises(StoreUnavailable):
                queue.schedule(task_type, 1)
            with pytest.raises(StoreUnavailable):
                queue.status("0123456789abcdef0123456789abcdef")
            with pytest.raises(StoreUnavailable):
                queue.cancel("0123456789abcdef0123456789abcdef")
        finally:
            queue.close()

    def test_a_worker_started_while_its_backend_is_unreachable_waits_with_one_log_line_naming_it(
        self, unreachable_url: str | None, queue_options: dict[str, Any], caplog: pytest.LogCaptureFixture
    ) -> None:
        """As the scheduler does: the worker keeps trying, says so once (naming the server, never the password),
        and stops at once when asked. (It runs in this thread: the database's connections are this thread's.)"""
        if unreachable_url is None:
            pytest.skip("this backend's test file gives no unreachable_url")
        self.define()
        queue = TaskQueue(unreachable_url, handlers=self.handlers, **queue_options)
        parts = urlsplit(unreachable_url)
        logged: list[list[logging.LogRecord]] = []
        asked_to_stop: list[float] = []

        def watch() -> None:
            try:
                wait_until(lambda: [line for line in outage_lines(caplog) if line.levelno >= logging.ERROR],
                           timeout=15, what="the worker to log the outage")
                time.sleep(2.0)  # several more tries, which log nothing more
                logged.append(outage_lines(caplog))
            finally:
                asked_to_stop.append(time.monotonic())
                queue.stop(timeout=0)

        watcher = threading.Thread(target=watch)
        try:
            with caplog.at_level(logging.INFO, logger="mutexcron"):
                watcher.start()
                queue.run_worker()  # returns once stopped: it waited for the store meanwhile, never raised
                returned = time.monotonic()
        finally:
            watcher.join()
            queue.close()
        (lines,) = logged
        messages = [line.getMessage() for line in lines]
        assert len(set(messages)) == len(messages), messages  # no line again at each try
        (error,) = [line.getMessage() for line in lines if line.levelno >= logging.ERROR]
        assert "unreachable" in error and parts.netloc.rpartition("@")[2] in error, error
        assert not parts.password or parts.password not in caplog.text
        assert returned - asked_to_stop[0] < 5


def outage_lines(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """What mutexcron logged at WARNING or above: the worker's one line about the outage (and, on PostgreSQL, the
    wake-up channel's own about its LISTEN connection)."""
    return [r for r in caplog.records if r.name.startswith("mutexcron") and r.levelno >= logging.WARNING]


# Task ids a message can carry (an AMQP message_id is any text of up to 255 bytes) that a record store may be
# unable to keep: a NUL byte (PostgreSQL's text holds none), a character outside the Basic Multilingual Plane
# (a MariaDB column in utf8mb3 or latin1 holds none), and more characters than a SQL column's 64.
AWKWARD_IDS = ("nul\x00byte", "emoji\U0001f600", "x" * 255)


def kept_or_refused(call: Callable[[], T], task_id: str) -> T | RecordDataError:
    """What ``call`` answered, or the RecordDataError it raised naming ``task_id``; anything else raises."""
    try:
        return call()
    except RecordDataError as error:
        assert repr(task_id) in str(error), error
        return error


class TaskRecordStoreContract(RecordIdContract, RecordStoreTelemetryContract):
    """What every task record store (the RabbitMQ backend's records: Redis, SQL, memory) decides when a message
    arrives, and how it keeps a task's result and trace context; a subclass provides the ``marks`` fixture."""

    def test_a_record_gives_back_its_run_at_in_utc(self, marks: TaskRecordStore) -> None:
        run_at = datetime(2026, 3, 29, 1, 30, tzinfo=UTC)
        marks.create([NewTask("a", "t", '"p"', run_at)])
        record = marks.get("a")
        assert record is not None and record.run_at == run_at and record.run_at.utcoffset() == timedelta(0)

    def test_claim_verdicts(self, marks: TaskRecordStore) -> None:
        def task(task_id: str) -> NewTask:
            marks.create([NewTask(task_id, "t", '"p"', datetime.now(UTC))])
            return NewTask(task_id, "t", '"p"', datetime.now(UTC))

        def claim(task_id: str, gen: int = 1, redelivered: bool = False, attempt: int = 1) -> tuple[Verdict, int]:
            found = marks.claim(task_id, gen=gen, attempt=attempt, redelivered=redelivered)
            return found.verdict, found.attempts

        assert claim("nothing") == (Verdict.MISSING, 0)
        task("a")
        assert claim("a") == (Verdict.RUN, 1)
        assert claim("a") == (Verdict.DUPLICATE, 1)  # a second copy while it runs
        assert claim("a", redelivered=True) == (Verdict.RUN, 2)  # the broker saw the consumer die: at least once
        assert marks.finish("a", gen=1, status=TaskStatus.SUCCEEDED)
        assert claim("a", redelivered=True) == (Verdict.DONE, 2)  # a crash after success, before the ack
        assert claim("a", gen=2, redelivered=True) == (Verdict.DONE, 2)

        task("b")
        assert marks.cancel("b") is True
        assert claim("b") == (Verdict.CANCELLED, 0)
        assert marks.cancel("b") is False

        task("c")
        assert claim("c") == (Verdict.RUN, 1)
        assert marks.cancel("c") is False  # started
        assert marks.reschedule("c", gen=1, new_gen=2, run_at=datetime.now(UTC), error="boom")
        assert claim("c", gen=1, redelivered=True) == (Verdict.STALE, 1)  # the original, after its retry went out
        assert claim("c", gen=2, attempt=2) == (Verdict.RUN, 2)
        assert marks.finish("c", gen=2, status=TaskStatus.FAILED, error="boom again")
        assert claim("c", gen=2, redelivered=True) == (Verdict.DONE, 2)
        assert claim("c", gen=3, attempt=1) == (Verdict.RUN, 1)  # retry(id)'s message overtook the record update
        assert marks.reopen("c", gen=2, new_gen=3, run_at=datetime.now(UTC)) is True

        task("d")
        assert claim("d") == (Verdict.RUN, 1)
        assert claim("d", gen=2, attempt=2) == (Verdict.RUN, 2)  # retry_later's message before its record update
        assert marks.reschedule("d", gen=1, new_gen=2, run_at=datetime.now(UTC), error="x") is False  # moved on

        record = marks.get("c")
        assert record is not None and (record.status, record.gen, record.attempts) == (TaskStatus.RUNNING, 3, 1)
        info = record.info()
        assert (info.payload, info.status) == ("p", TaskStatus.RUNNING)

    @staticmethod
    def wait_out_the_retention(marks: TaskRecordStore) -> None:
        """Return once a record that finishes now has expired: the retention has passed for every record whose
        expiry was set before this call (polls the store; no fixed sleep)."""
        witness = NewTask(f"witness-{time.monotonic_ns()}", "t", '"w"', datetime.now(UTC))
        marks.create([witness])
        assert marks.claim(witness.id, gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.finish(witness.id, gen=1, status=TaskStatus.SUCCEEDED)
        wait_until(lambda: marks.get(witness.id) is None, 10 + marks.retention.total_seconds(),
                   "a record finished now to expire")

    def test_a_cancel_mark_outlives_the_retention_until_its_message_arrives(self, marks: TaskRecordStore) -> None:
        """Workers may start however late: the message of a cancelled task must still find its mark, and the
        message of a task that was not cancelled its record."""
        marks.retention = timedelta(seconds=1)
        due = datetime.now(UTC)
        marks.create([NewTask("cancelled", "t", '"p"', due), NewTask("waiting", "t", '"p"', due)])
        assert marks.cancel("cancelled")
        self.wait_out_the_retention(marks)
        assert marks.claim("cancelled", gen=1, attempt=1, redelivered=False).verdict == Verdict.CANCELLED
        assert marks.claim("waiting", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN

    def test_a_cancel_mark_expires_a_retention_after_its_message_arrived(self, marks: TaskRecordStore) -> None:
        marks.retention = timedelta(seconds=1)
        marks.create([NewTask("cancelled", "t", '"p"', datetime.now(UTC) + timedelta(days=1))])
        assert marks.cancel("cancelled")
        assert marks.claim("cancelled", gen=1, attempt=1, redelivered=False).verdict == Verdict.CANCELLED
        self.wait_out_the_retention(marks)
        assert marks.get("cancelled") is None

    def test_a_result_is_kept_with_its_record(self, marks: TaskRecordStore) -> None:
        assert marks.store_result("unknown", "{}") is False
        assert marks.load_result("unknown") is None
        assert marks.get("unknown") is None  # a result does not make a record
        marks.create([NewTask("a", "t", '"p"', datetime.now(UTC))])
        assert marks.load_result("a") is None
        assert marks.store_result("a", '{"started": 1}') is True
        assert marks.claim("a", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.load_result("a") == '{"started": 1}'
        assert marks.store_result("a", '{"done": "é"}') is True  # replaces the one before
        assert marks.finish("a", gen=1, status=TaskStatus.FAILED, error="boom")
        assert marks.reopen("a", gen=1, new_gen=2, run_at=datetime.now(UTC))
        assert marks.load_result("a") == '{"done": "é"}'  # kept across the record's changes
        record = marks.get("a")
        assert record is not None and (record.status, record.gen, record.payload) == (TaskStatus.SCHEDULED, 2, '"p"')
        marks.discard(["a"])
        assert marks.load_result("a") is None and marks.store_result("a", "{}") is False

    @pytest.mark.parametrize("task_id", AWKWARD_IDS, ids=["nul", "emoji", "255-chars"])
    def test_a_task_id_the_store_cannot_keep_is_refused_as_bad_data_not_as_an_outage(
        self, marks: TaskRecordStore, task_id: str,
    ) -> None:
        """A delivered message's id goes to claim() as it is: one the store cannot keep must be told apart from
        an outage, or the consumer would put the message back in the queue for good. Each call answers as for an
        unknown id or raises RecordDataError naming it, never StoreUnavailable."""
        now = datetime.now(UTC)
        unknown: dict[str, tuple[Callable[[], object], object]] = {
            "get": (lambda: marks.get(task_id), None),
            "claim": (lambda: marks.claim(task_id, gen=1, attempt=1, redelivered=False), Claim(Verdict.MISSING, 0)),
            "cancel": (lambda: marks.cancel(task_id), False),
            "finish": (lambda: marks.finish(task_id, gen=1, status=TaskStatus.SUCCEEDED), False),
            "reschedule": (lambda: marks.reschedule(task_id, gen=1, new_gen=2, run_at=now, error="x"), False),
            "reopen": (lambda: marks.reopen(task_id, gen=1, new_gen=2, run_at=now), False),
            "store_result": (lambda: marks.store_result(task_id, "{}"), False),
            "load_result": (lambda: marks.load_result(task_id), None),
        }
        for name, (call, answer) in unknown.items():
            got = kept_or_refused(call, task_id)
            assert got == answer or isinstance(got, RecordDataError), (name, got)
        if not isinstance(kept_or_refused(lambda: marks.create([NewTask(task_id, "t", '"p"', now)]), task_id),
                          RecordDataError):
            record = marks.get(task_id)
            assert record is not None and record.id == task_id
            assert marks.claim(task_id, gen=1, attempt=1, redelivered=False) == Claim(Verdict.RUN, 1)
        marks.create([NewTask("after", "t", '"p"', now)])  # the store still works
        assert marks.claim("after", gen=1, attempt=1, redelivered=False) == Claim(Verdict.RUN, 1)

    def test_a_result_expires_with_its_record(self, marks: TaskRecordStore) -> None:
        marks.retention = timedelta(seconds=1)
        marks.create([NewTask("a", "t", '"p"', datetime.now(UTC))])
        assert marks.claim("a", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.store_result("a", "kept")
        assert marks.finish("a", gen=1, status=TaskStatus.SUCCEEDED)
        self.wait_out_the_retention(marks)
        assert marks.load_result("a") is None
        assert marks.store_result("a", "late") is False  # the record is not brought back
        assert marks.get("a") is None and marks.load_result("a") is None


"""The caller's task id (``schedule(..., task_id=...)``), mixed into :class:`tests.tasks.contract.TaskQueueContract`
and :class:`~tests.tasks.contract.TaskRecordStoreContract`, so every backend and record store proves it: scheduling
an id that exists is a no-op that returns the id, the existing task is kept and delivered once, however many
callers schedule it at once; a bad id is a PayloadError and nothing is stored. ``run_on="tasks"`` relies on it
(a tick's task id comes from the job name and the fire time)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mutexcron.tasks import NewTask, PayloadError, TaskQueue, TaskStatus
from mutexcron.tasks.records.base import TaskRecordStore, Verdict
from tests.support import unique_name, wait_until

BAD_IDS = ["", " x", "a b", "x" * 65, "-starts-with-a-dash", "é", "a/b", "{slot}", 12]


class TaskIdContract:
    """A caller's task id on one backend (the rest of :class:`TaskQueueContract` provides the helpers)."""

    define: Callable[..., str]
    worker: Callable[..., TaskQueue]
    runs: Any

    def test_scheduling_an_existing_id_returns_it_and_keeps_the_first_task(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        queue = make_queue()
        task_id = unique_name("tick:")
        assert queue.schedule(task_type, "first", delay=timedelta(hours=1), task_id=task_id) == task_id
        assert queue.schedule(task_type, "second", delay=timedelta(seconds=1), task_id=task_id) == task_id
        info = queue.info(task_id)
        assert info is not None and (info.payload, info.status) == ("first", TaskStatus.SCHEDULED)

    def test_a_task_id_scheduled_twice_runs_once(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = self.worker(make_queue)
        task_id = unique_name("tick:")
        queue.schedule(task_type, "once", task_id=task_id)
        queue.schedule(task_type, "once", task_id=task_id)
        wait_until(lambda: queue.status(task_id) == TaskStatus.SUCCEEDED, what="the task to succeed")
        queue.schedule(task_type, "once", task_id=task_id)  # after it ran: still the same task, not run again
        marker = queue.schedule(task_type, "marker")
        wait_until(lambda: queue.status(marker) == TaskStatus.SUCCEEDED, what="a later task to run")
        time.sleep(0.2)
        assert self.runs.payloads().count("once") == 1
        assert queue.status(task_id) == TaskStatus.SUCCEEDED

    def test_one_task_id_scheduled_from_eight_threads_at_once_is_one_task_run_once(
        self, make_queue: Callable[..., TaskQueue]
    ) -> None:
        task_type = self.define()
        worker = self.worker(make_queue)
        producers = [make_queue() for _ in range(4)]
        task_id = unique_name("tick:")
        start = threading.Barrier(8)
        answers: list[object] = []

        def schedule(queue: TaskQueue) -> None:
            start.wait(5)
            try:
                answers.append(queue.schedule(task_type, "raced", task_id=task_id))
            except Exception as error:  # reported by the assertion below
                answers.append(error)

        threads = [threading.Thread(target=schedule, args=(producers[n % 4],)) for n in range(8)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert answers == [task_id] * 8
        wait_until(lambda: worker.status(task_id) == TaskStatus.SUCCEEDED, what="the task to succeed")
        marker = worker.schedule(task_type, "marker")
        wait_until(lambda: worker.status(marker) == TaskStatus.SUCCEEDED, what="a later task to run")
        time.sleep(0.2)
        assert self.runs.payloads().count("raced") == 1

    def test_schedule_many_stores_an_id_given_twice_once(self, make_queue: Callable[..., TaskQueue]) -> None:
        task_type = self.define()
        queue = make_queue()
        task_id = unique_name("tick:")
        later = {"delay": timedelta(hours=1), "task_id": task_id}
        ids = queue.schedule_many([(task_type, "a", later), (task_type, "b", later), (task_type, "c")])
        assert ids[:2] == [task_id, task_id] and ids[2] != task_id
        info = queue.info(task_id)
        assert info is not None and info.payload == "a"

    @pytest.mark.parametrize("bad", BAD_IDS)
    def test_a_bad_task_id_is_a_payload_error_naming_it_and_nothing_is_stored(
        self, make_queue: Callable[..., TaskQueue], bad: object
    ) -> None:
        task_type = self.define()
        queue = make_queue()
        with pytest.raises(PayloadError, match="task_id=") as raised:
            queue.schedule_many([(task_type, "good", {"task_id": "good-one"}), (task_type, "bad", {"task_id": bad})])
        assert repr(bad)[:40] in str(raised.value)
        assert queue.info("good-one") is None


class RecordIdContract:
    """What a record store does with an id it holds already (the RabbitMQ backend claims ids with it)."""

    def test_create_keeps_a_live_record_of_the_same_id_and_returns_the_ids_it_wrote(
        self, marks: TaskRecordStore
    ) -> None:
        now = datetime.now(UTC)
        assert marks.create([NewTask("a", "t", '"first"', now), NewTask("b", "t", '"b"', now)]) == {"a", "b"}
        assert marks.create([NewTask("a", "t", '"second"', now), NewTask("c", "t", '"c"', now)]) == {"c"}
        record = marks.get("a")
        assert record is not None and record.payload == '"first"'
        assert marks.claim("a", gen=1, attempt=1, redelivered=False).verdict == Verdict.RUN
        assert marks.create([NewTask("a", "t", '"third"', now)]) == set()  # running: kept too
        assert marks.claim("a", gen=1, attempt=1, redelivered=False).verdict == Verdict.DUPLICATE

    def test_create_of_one_id_twice_in_a_batch_writes_it_once(self, marks: TaskRecordStore) -> None:
        now = datetime.now(UTC)
        assert marks.create([NewTask("a", "t", '"1"', now), NewTask("a", "t", '"2"', now)]) == {"a"}
        record = marks.get("a")
        assert record is not None and record.payload == '"1"'

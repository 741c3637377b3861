"""Ctrl-C on a plain-Python ``queue.run_worker()`` in the main thread: a clean stop after the running task, one log
line, no traceback (a real worker process, tests/tasks/foreground_worker.py, on Redis)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from mutexcron.tasks import HandlerRegistry, TaskQueue, TaskStatus, task_handler
from tests.support import wait_until

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "tests" / "tasks" / "foreground_worker.py"
CTRL_C_LINE = "Ctrl-C received; stopping after the task it is running"


@dataclass
class Worker:
    process: subprocess.Popen[bytes]
    log: Path
    ledger: Path

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def lines(self) -> list[str]:
        return self.ledger.read_text().splitlines() if self.ledger.exists() else []

    def wait_consuming(self) -> None:
        def consuming() -> bool:
            assert self.process.poll() is None, self.text()
            return "consuming foreground.task" in self.text()

        wait_until(consuming, timeout=15, what="the worker to consume")

    def exit_code(self, timeout: float = 15) -> int:
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            raise AssertionError(f"the worker did not exit after Ctrl-C:\n{self.text()}") from None


@pytest.fixture
def worker(tmp_path: Path, redis_tasks_url: str) -> Iterator[Worker]:
    log, ledger = tmp_path / "worker.log", tmp_path / "ledger.txt"
    with log.open("wb") as output:
        process = subprocess.Popen([sys.executable, str(SCRIPT), redis_tasks_url, str(ledger)], cwd=ROOT,
                                   stdout=output, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONPATH": str(ROOT), "PYTHONUNBUFFERED": "1"})
    started = Worker(process, log, ledger)
    try:
        yield started
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


@pytest.fixture
def producer(redis_tasks_url: str) -> Iterator[TaskQueue]:
    handlers = HandlerRegistry()
    task_handler("foreground.task", registry=handlers)(lambda payload: None)  # the worker's type, known here
    queue = TaskQueue(redis_tasks_url, handlers=handlers)
    yield queue
    queue.close()


def test_ctrl_c_on_an_idle_foreground_worker_returns_from_run_worker_with_one_line_and_no_traceback(
        worker: Worker) -> None:
    worker.wait_consuming()
    worker.process.send_signal(signal.SIGINT)

    assert worker.exit_code() == 0, worker.text()
    text = worker.text()
    assert "Traceback" not in text and "KeyboardInterrupt" not in text, text
    assert text.count(CTRL_C_LINE) == 1 and "run_worker returned" in text, text


def test_ctrl_c_during_a_task_lets_it_finish_then_returns_from_run_worker(worker: Worker,
                                                                          producer: TaskQueue) -> None:
    worker.wait_consuming()
    task_id = producer.schedule("foreground.task", 1)
    wait_until(lambda: worker.lines() == ["started 1"], timeout=10, what="the task to start")

    worker.process.send_signal(signal.SIGINT)
    wait_until(lambda: CTRL_C_LINE in worker.text(), timeout=10, what="the worker to say it stops after the task")
    assert worker.process.poll() is None  # the task is still running: the worker waits for it
    worker.ledger.with_name(worker.ledger.name + ".go").touch()

    assert worker.exit_code() == 0, worker.text()
    assert worker.lines() == ["started 1", "finished 1"]
    assert producer.status(task_id) == TaskStatus.SUCCEEDED
    assert "Traceback" not in worker.text(), worker.text()

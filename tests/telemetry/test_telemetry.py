"""The telemetry hooks a scheduler calls (mutexcron.telemetry): a failing hook never breaks a run."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime

import pytest

from mutexcron import JobContext, Registry, mutex_cron
from mutexcron.registry import Job
from mutexcron.telemetry import Telemetries, Telemetry


class Recording(Telemetry):
    def __init__(self) -> None:
        self.events: list[str] = []

    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        @contextmanager
        def around() -> Iterator[None]:
            self.events.append("enter")
            try:
                yield
            except ValueError:
                self.events.append("error")
                raise
            self.events.append("exit")

        return around()


class Broken(Telemetry):
    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        raise RuntimeError("telemetry is broken")


@pytest.fixture
def job(registry: Registry) -> Job:
    mutex_cron("0 6 * * *", name="job", registry=registry)(lambda: None)
    return registry.get("job")


CTX = JobContext("job", datetime(2026, 3, 1, 6, 0, tzinfo=UTC), "A", 1)


def test_a_part_that_fails_to_start_is_logged_and_the_body_still_runs_under_the_others(
        job: Job, caplog: pytest.LogCaptureFixture) -> None:
    recording = Recording()
    ran: list[bool] = []
    telemetry = Telemetries([Broken(), recording])
    with caplog.at_level(logging.ERROR, logger="mutexcron.telemetry"), telemetry.body(job, CTX):
        ran.append(True)
    assert ran == [True] and recording.events == ["enter", "exit"]
    assert "failed at the start of job 'job'" in caplog.text


def test_the_bodys_exception_passes_through_every_part(job: Job) -> None:
    recording = Recording()
    with pytest.raises(ValueError, match="boom"), Telemetries([recording]).body(job, CTX):
        raise ValueError("boom")
    assert recording.events == ["enter", "error"]


def test_no_parts_is_no_telemetry(job: Job) -> None:
    telemetry = Telemetries([])
    assert not telemetry
    with telemetry.body(job, CTX):
        pass

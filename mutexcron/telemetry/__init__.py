"""What a scheduler tells its telemetry: the hooks that metrics (:mod:`mutexcron.telemetry.metrics`) and traces
(:mod:`mutexcron.telemetry.tracing`) implement, and the composite a scheduler calls. Telemetry never breaks a run: a
failing hook is logged and the run goes on."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from types import TracebackType
from typing import TYPE_CHECKING, Any

from ..errors import SchedulerConfigError

if TYPE_CHECKING:
    from ..records import JobContext, RunRecord
    from ..registry import Job

__all__ = ["Telemetry", "build_telemetry", "check_flags", "load_part"]

logger = logging.getLogger("mutexcron.telemetry")


class Telemetry:
    """The hooks, each a no-op here."""

    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        """Entered around a job body in its thread (a span is current inside it); an exception from the body
        passes through it before the run records ``failed``."""
        return _NOTHING

    def finished(self, record: RunRecord) -> None:
        """Every run or skip of this instance, as the ``"finished"`` listeners get it."""

    def overdue(self, job_name: str, overdue: bool) -> None:
        """This instance's latest view of whether ``job_name`` is overdue (at every alerts check)."""

    def ping_dropped(self, origin: str) -> None:
        """A ping to ``origin`` (``scheme://host:port``, nothing secret) was dropped from its full queue."""


class Telemetries(Telemetry):
    """Several telemetries as one; a hook that raises is logged, the others still run."""

    def __init__(self, parts: Sequence[Telemetry]) -> None:
        self.parts = list(parts)

    def __bool__(self) -> bool:
        return bool(self.parts)

    def body(self, job: Job, ctx: JobContext) -> AbstractContextManager[object]:
        return _Bodies(self.parts, job, ctx) if self.parts else _NOTHING

    def finished(self, record: RunRecord) -> None:
        for part in self.parts:
            try:
                part.finished(record)
            except Exception:
                logger.exception("mutexcron telemetry %r failed on a record of job %r", part, record.job_name)

    def overdue(self, job_name: str, overdue: bool) -> None:
        for part in self.parts:
            try:
                part.overdue(job_name, overdue)
            except Exception:
                logger.exception("mutexcron telemetry %r failed on the overdue state of %r", part, job_name)

    def ping_dropped(self, origin: str) -> None:
        for part in self.parts:
            try:
                part.ping_dropped(origin)
            except Exception:
                logger.exception("mutexcron telemetry %r failed on a dropped ping of %s", part, origin)


class _Bodies:
    """Every part's body context, entered in order and left in reverse; a part whose entry fails is logged and
    left out. A class, not a generator: it runs around every job body."""

    __slots__ = ("_ctx", "_entered", "_job", "_parts")

    def __init__(self, parts: Sequence[Telemetry], job: Job, ctx: JobContext) -> None:
        self._parts, self._job, self._ctx = parts, job, ctx
        self._entered: list[AbstractContextManager[object]] = []

    def __enter__(self) -> None:
        for part in self._parts:
            try:
                body = part.body(self._job, self._ctx)
                body.__enter__()
            except Exception:
                logger.exception("mutexcron telemetry %r failed at the start of job %r", part, self._job.name)
                continue
            self._entered.append(body)

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 traceback: TracebackType | None) -> None:
        for body in reversed(self._entered):
            try:
                body.__exit__(kind, error, traceback)
            except Exception:
                logger.exception("mutexcron telemetry failed at the end of job %r", self._job.name)


_NOTHING = nullcontext()


# option -> (module, class, what it needs, the extra that installs it)
_PARTS = {
    "metrics": ("mutexcron.telemetry.metrics", "JobMetrics", "prometheus-client", "prometheus"),
    "tracing": ("mutexcron.telemetry.tracing", "JobTracing", "opentelemetry-api", "otel"),
}


def load_part(option: str, *, what: str, error: type[Exception], name: str | None = None) -> Any:
    """The class (or module attribute ``name``) behind ``option`` ("metrics", "tracing"); ``error`` saying that
    ``what`` (e.g. "Scheduler metrics=True") needs the extra to install when its library is missing."""
    module, attribute, library, extra = _PARTS[option]
    try:
        return getattr(importlib.import_module(module), name or attribute)
    except ImportError as missing:
        raise error(f"{what} needs {library}: pip install 'mutexcron[{extra}]' ({missing})") from None


def check_flags(owner: str, error: type[Exception], **flags: object) -> None:
    """Each of ``flags`` (metrics=, tracing=) must be a bool."""
    for option, value in flags.items():
        if not isinstance(value, bool):
            raise error(f"{owner} {option} must be True or False, not {value!r}")


def build_telemetry(*, metrics: bool, tracing: bool, error: type[Exception] = SchedulerConfigError) -> Telemetries:
    """The telemetry for ``Scheduler(metrics=..., tracing=...)``; ``error`` (naming the extra to install) when
    the library it needs is missing."""
    check_flags("Scheduler", error, metrics=metrics, tracing=tracing)
    wanted = [option for option, on in (("metrics", metrics), ("tracing", tracing)) if on]
    return Telemetries([load_part(option, what=f"Scheduler {option}=True", error=error)() for option in wanted])

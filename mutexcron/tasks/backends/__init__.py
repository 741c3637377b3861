"""What a task backend's author needs, in one place: the contracts, and the helpers the built-in backends share.

A backend implements :class:`TaskBackend` and hands due tasks to workers as :class:`Delivery` objects; a broker's
backend, which cannot look a task up, keeps its records in a :class:`TaskRecordStore`. The claiming helpers
(:class:`ClaimingConsumer`, :class:`ClaimedDelivery`, :class:`ClaimHeartbeat`, ...) serve backends that claim due
tasks with a visibility deadline (Redis, SQL). The backends themselves (``redis``, ``rabbitmq``) are submodules,
imported only when used, so their client libraries are needed only then. Users import from :mod:`mutexcron.tasks`;
the helpers every kind of backend shares (client errors, clipped tracebacks, times) are in
:mod:`mutexcron.backend_helpers`.
"""

from ..model import NewTask, TaskInfo, TaskStatus
from ..records.base import Claim, TaskRecord, TaskRecordStore, Verdict, cancel_store_from_url
from .base import (
    ClaimedDelivery,
    ClaimHeartbeat,
    ClaimingBackend,
    ClaimingConsumer,
    ConsumeRequest,
    Delivery,
    RunningConsumers,
    TaskBackend,
    consumed_types,
    run_batch,
    warn_stale_settle,
)

__all__ = [
    "Claim",
    "ClaimHeartbeat",
    "ClaimedDelivery",
    "ClaimingBackend",
    "ClaimingConsumer",
    "ConsumeRequest",
    "Delivery",
    "NewTask",
    "RunningConsumers",
    "TaskBackend",
    "TaskInfo",
    "TaskRecord",
    "TaskRecordStore",
    "TaskStatus",
    "Verdict",
    "cancel_store_from_url",
    "consumed_types",
    "run_batch",
    "warn_stale_settle",
]

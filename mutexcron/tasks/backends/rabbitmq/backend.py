"""Delayed tasks on RabbitMQ: fixed-TTL level queues hold the delays, a record store beside it the task records.

``TaskQueue("amqp://user:pass@host:5672/vhost?prefix=…", cancel_store="redis://…")``

RabbitMQ cannot look up, change or delete a waiting message, so each task's status, attempts, error and
cancel mark live in one record in the record store (the cancel store); the message only travels. The
topology, the consumers and the measurements are described in ``docs/rabbitmq.md``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from contextlib import suppress
from datetime import UTC, datetime
from urllib.parse import parse_qsl, urlsplit

import pika

from ...._common import duration_ms, epoch_ms
from ....errors import StoreConfigError, StoreUnavailable
from ....urls import check_host_and_port, mask_url, pop_query_options, scrub
from ...handlers import validate_task_type
from ...model import NewTask, TaskInfo, TaskStatus, UnknownTaskType
from ...records.base import TaskRecordStore, cancel_store_from_url
from ..base import ConsumeRequest, TaskBackend
from .connection import BrokerConnection
from .consumer import TaskConsumer
from .link import LiveLinks
from .topology import HEADER_ATTEMPT, HEADER_GEN, HEADER_RUN_AT, HEADER_UNTIL, QUEUE_TYPES, Topology
from .topology import TaskMessage as _Message

__all__ = ["HEADER_ATTEMPT", "HEADER_GEN", "HEADER_RUN_AT", "HEADER_UNTIL", "QUEUE_TYPES", "RabbitMQTaskBackend",
           "Topology"]


class RabbitMQTaskBackend(BrokerConnection, TaskBackend):
    """Delayed tasks on RabbitMQ, their records in a :class:`TaskRecordStore` (``marks``).

    The record store holds the one record of each task: ``info``, ``cancel`` and ``retry`` read and
    change only it, and a consumer claims it before a handler runs. A message carries what routing,
    fencing and the handler need (id, type, generation, attempt, due time, payload) and is never read
    back for a task's status, so there is no second record to keep in step. The broker side
    (connections, declarations, the confirming publisher) is :class:`BrokerConnection`; a consume()
    call is a :class:`~.consumer.TaskConsumer`.
    """

    needs_record_store = True  # the broker cannot look a waiting message up: from_url() takes a cancel_store

    def __init__(
        self,
        parameters: pika.ConnectionParameters | pika.URLParameters,
        marks: TaskRecordStore,
        *,
        topology: Topology | None = None,
        url: str | None = None,
        heartbeat: int | None = None,
    ) -> None:
        """``heartbeat``: the consumers' heartbeat timeout in seconds (default: the shortest visibility
        timeout of the task types consumed, between 5 and 60 s)."""
        super().__init__(parameters, topology, url)
        self.marks = marks
        self.heartbeat = heartbeat
        self._links = LiveLinks()

    @property
    def record_store(self) -> TaskRecordStore:
        """``marks``, the store of this backend's task records (see :attr:`TaskBackend.record_store`)."""
        return self.marks

    @classmethod
    def from_url(cls, url: str, *, cancel_store: str | TaskRecordStore | None = None) -> RabbitMQTaskBackend:
        """``amqp[s]://user:pass@host:port/vhost?prefix=…&levels=28&unit_ms=10&queue_type=quorum``.

        Also ``queue_prefix=…`` (the task queues' own prefix), ``delay_queue_type=quorum|classic``, and
        pika's own URL options (``heartbeat``, ``blocked_connection_timeout``, ``socket_timeout``,
        ``ssl_options``…). ``cancel_store`` is required.
        """
        ours = ("prefix", "queue_prefix", "levels", "unit_ms", "queue_type", "delay_queue_type")
        cleaned, options = pop_query_options(url, ours)
        check_host_and_port(cleaned)
        try:
            parameters = pika.URLParameters(cleaned)
        except (ValueError, TypeError) as error:
            raise StoreConfigError(f"malformed RabbitMQ URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
        given = {key for key, _ in parse_qsl(urlsplit(cleaned).query)}
        if "blocked_connection_timeout" not in given:
            parameters.blocked_connection_timeout = 30.0  # a broker in alarm must not hang a publisher for ever
        if "socket_timeout" not in given:
            parameters.socket_timeout = 5.0
        if "connection_attempts" not in given:
            parameters.connection_attempts = 1
        if "heartbeat" not in given:
            parameters.heartbeat = 60  # the publisher's; bounds a wait for a confirm on a dead connection
        numbers: dict[str, int] = {}
        for name, default in (("levels", 28), ("unit_ms", 10)):
            raw = options.get(name, str(default))
            try:
                numbers[name] = int(raw)
            except ValueError:
                raise StoreConfigError(f"RabbitMQ URL {mask_url(url)!r}: {name}={raw!r} is not an integer") from None
        topology = Topology(
            options.get("prefix", ""), queue_prefix=options.get("queue_prefix"), levels=numbers["levels"],
            unit_ms=numbers["unit_ms"],
            queue_type=options.get("queue_type", "quorum"), delay_queue_type=options.get("delay_queue_type", "quorum"),
        )
        marks = cancel_store_from_url(cancel_store, backend="the RabbitMQ task backend")
        heartbeat = parameters.heartbeat if "heartbeat" in given and isinstance(parameters.heartbeat, int) else None
        return cls(parameters, marks, topology=topology, url=cleaned, heartbeat=heartbeat)

    def enqueue(self, tasks: Sequence[NewTask]) -> None:
        """Write the records, then publish with confirms; the records of messages not confirmed are discarded.

        The record store claims each id first: a task whose id has a live record (a caller's id scheduled
        again) is not published again, so it is delivered once."""
        if not tasks:
            return
        for task in tasks:
            _check_type(task.task_type)
        created = self.marks.create(tasks)  # an id whose record is live already has its message: not sent again
        tasks = [task for task in tasks if task.id in created]
        if not tasks:
            return
        messages = [_Message(t.id, t.task_type, t.payload, epoch_ms(t.run_at), 1, 1, trace_context=t.trace_context)
                    for t in tasks]
        due = {t.id: t.run_at for t in tasks}
        confirmed: list[str] = []
        try:
            self._publish_with_retry(
                messages, lambda m: duration_ms(due[m.task_id] - datetime.now(UTC)), confirmed
            )
        except BaseException:
            sent = set(confirmed)
            unsent = [t.id for t in tasks if t.id not in sent]
            with suppress(StoreUnavailable):
                self.marks.discard(unsent)  # a published message whose confirm was lost is dead-lettered on arrival
            raise

    def cancel(self, task_id: str) -> bool:
        return self.marks.cancel(task_id)

    def info(self, task_id: str) -> TaskInfo | None:
        record = self.marks.get(task_id)
        return record.info() if record is not None else None

    def retry(self, task_id: str) -> bool:
        record = self.marks.get(task_id)
        if record is None or record.status != TaskStatus.FAILED:
            return False
        now = datetime.now(UTC)
        message = _Message(record.id, record.task_type, record.payload, epoch_ms(now), record.gen + 1, 1,
                           trace_context=record.trace_context)
        self._publish_with_retry([message], lambda _m: 0)  # published first: a crash between leaves no lost task
        return self.marks.reopen(task_id, gen=record.gen, new_gen=record.gen + 1, run_at=datetime.now(UTC))

    def pending_counts(self) -> Mapping[str, int] | None:
        """The record store's scheduled records by type (the broker cannot tell the types of the messages
        waiting in its level queues); None with a record store that cannot count them (Redis)."""
        return self.marks.pending_counts()

    @property
    def pending_source(self) -> str:
        return f"records {self.marks.pending_source}"

    def store_result(self, task_id: str, text: str) -> bool:
        return self.marks.store_result(task_id, text)

    def load_result(self, task_id: str) -> str | None:
        return self.marks.load_result(task_id)

    def deliver(self, request: ConsumeRequest) -> None:
        """Run ``request.handle`` in this thread for each delivered task until ``request.stop`` is set.

        The connection lives in an I/O thread of its own (see :class:`~.link.ConsumerLink`). A
        connection that fails at start raises :class:`StoreUnavailable`; one lost later is re-made with backoff.
        """
        types = request.types
        for task_type in types:
            _refuse_reserved(task_type)
        heartbeat = self.heartbeat
        if heartbeat is None:  # a silently dead consumer's tasks come back after about its visibility timeout
            shortest = min(request.visibility_timeout(task_type).total_seconds() for task_type in types)
            heartbeat = min(60, max(5, math.ceil(shortest)))
        TaskConsumer(self, self.marks, request, heartbeat=heartbeat, links=self._links).run()

    def wake(self) -> None:
        self._links.wake()

    def close(self) -> None:
        self.close_producer()
        self.marks.close()

    def __repr__(self) -> str:
        return f"<RabbitMQTaskBackend {self.display} prefix={self.topology.prefix!r} marks={self.marks!r}>"


def _check_type(task_type: str) -> None:
    """A task type this backend takes: valid, and not one of its own ``mutexcron.`` names."""
    _refuse_reserved(validate_task_type(task_type))


def _refuse_reserved(task_type: str) -> None:
    if task_type.startswith("mutexcron."):
        raise UnknownTaskType(f"task type {task_type!r}: names starting with 'mutexcron.' are the backend's own")

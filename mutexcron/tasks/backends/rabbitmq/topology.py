"""The RabbitMQ task backend's names and message format: the topology, decoding, a delivered message, and the
dead-letter queues.

Queue names (``Q`` is the ``?queue_prefix=``; neither it nor a task type may contain ``@``)::

    Q task@<task type>          the workers' queue of a task type
    Q dead-letter@<task type>   the messages of that queue that no consumer could decode, kept for an operator

Each name has exactly one ``@``, so it splits back into one prefix and one type: prefix ``billing.`` with
type ``sync`` is ``billing.task@sync``, the empty prefix with type ``billing.sync`` is ``task@billing.sync``.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import pika
from pika.adapters.blocking_connection import BlockingChannel

from ....errors import StoreConfigError
from ...model import decode_trace_context, encode_trace_context

HEADER_GEN = "x-mutexcron-gen"
HEADER_ATTEMPT = "x-mutexcron-attempt"
HEADER_RUN_AT = "x-mutexcron-run-at"  # the task's due time (ms since the epoch): what a long delay is re-sent for
HEADER_UNTIL = "x-mutexcron-until"  # only on a delay longer than the levels hold: re-publish until this time (ms)
HEADER_DEAD_REASON = "x-mutexcron-dead-reason"  # on a dead-lettered message: why no consumer could use it
HEADER_DEAD_QUEUE = "x-mutexcron-dead-queue"  # on a dead-lettered message: the queue it was taken from
HEADER_TRACE = "x-mutexcron-trace"  # the W3C trace context of the schedule() call (JSON text), when there was one

QUEUE_TYPES = ("quorum", "classic")
_MAX_TTL_MS = 2**32 - 1  # x-message-ttl is an unsigned 32-bit integer
_MAX_LEVELS = 32  # more levels than this cannot fit the TTL limit at any unit
_MAX_TIME_MS = 253402300799999  # 9999-12-31T23:59:59.999Z, the last time a datetime can hold
_MAX_COUNT = 2**31 - 1  # gen and attempt are kept in 32-bit integer columns


class Topology:
    """Names, arguments and routes of the queues and exchanges (see ``docs/rabbitmq.md``)."""

    def __init__(
        self, prefix: str = "", *, queue_prefix: str | None = None, levels: int = 28, unit_ms: int = 10,
        queue_type: str = "quorum", delay_queue_type: str = "quorum",
    ) -> None:
        if not isinstance(levels, int) or isinstance(levels, bool) or not 1 <= levels <= _MAX_LEVELS:
            raise StoreConfigError(
                f"RabbitMQ task backend: levels must be an integer from 1 to {_MAX_LEVELS}, not {levels!r}"
            )
        if not isinstance(unit_ms, int) or isinstance(unit_ms, bool) or not 1 <= unit_ms <= _MAX_TTL_MS:
            raise StoreConfigError(
                f"RabbitMQ task backend: unit_ms must be an integer from 1 to {_MAX_TTL_MS}, not {unit_ms!r}"
            )
        if 2 ** (levels - 1) * unit_ms > _MAX_TTL_MS:
            raise StoreConfigError(
                f"RabbitMQ task backend: {levels} levels of {unit_ms} ms need a TTL of "
                f"{2 ** (levels - 1) * unit_ms} ms, over RabbitMQ's limit of {_MAX_TTL_MS}; use fewer levels"
            )
        for name, value in (("queue_type", queue_type), ("delay_queue_type", delay_queue_type)):
            if value not in QUEUE_TYPES:
                raise StoreConfigError(f"RabbitMQ task backend: {name} must be quorum or classic, not {value!r}")
        queue_prefix = prefix if queue_prefix is None else queue_prefix
        for name, value in (("prefix", prefix), ("queue_prefix", queue_prefix)):
            if any(ch in value for ch in "*#@") or len(value) > 64:  # "@" keeps the queue names unambiguous
                raise StoreConfigError(
                    f"RabbitMQ task backend: {name} {value!r} must be at most 64 characters, without * # @"
                )
        self.prefix = prefix
        self.queue_prefix = queue_prefix
        self.levels = levels
        self.unit_ms = unit_ms
        self.queue_type = queue_type
        self.delay_queue_type = delay_queue_type
        self.tasks_exchange = f"{prefix}mutexcron.tasks"
        self.entry_exchange = f"{prefix}mutexcron.delay"
        # Declared last: when it exists, everything above was declared with these settings.
        self.marker_exchange = f"{prefix}mutexcron.delay.ready.{levels}x{unit_ms}ms.{delay_queue_type}"

    @property
    def max_delay_ms(self) -> int:
        """The longest delay one pass through the levels holds."""
        return ((1 << self.levels) - 1) * self.unit_ms

    def task_queue(self, task_type: str) -> str:
        """The workers' queue of ``task_type``: one ``@`` between prefix and type, so no two pairs share it."""
        return f"{self.queue_prefix}task@{task_type}"

    def dead_letter_queue(self, task_type: str) -> str:
        """Where the undecodable messages of ``task_type``'s queue are kept for an operator."""
        return f"{self.queue_prefix}dead-letter@{task_type}"

    def level_queue(self, level: int) -> str:
        return f"{self.prefix}mutexcron.delay.{level}"

    def level_exchange(self, level: int) -> str:
        """Where level ``level`` dead-letters to; level 0 goes straight to the tasks exchange."""
        return f"{self.prefix}mutexcron.delay.{level}" if level > 0 else self.tasks_exchange

    def level_arguments(self, level: int) -> dict[str, Any]:
        arguments: dict[str, Any] = {
            "x-message-ttl": 2**level * self.unit_ms,
            "x-dead-letter-exchange": self.level_exchange(level),
            "x-overflow": "reject-publish",
        }
        if self.delay_queue_type == "quorum":
            arguments.update({"x-queue-type": "quorum", "x-dead-letter-strategy": "at-least-once"})
        return arguments

    def task_queue_arguments(self) -> dict[str, Any]:
        return {"x-queue-type": "quorum"} if self.queue_type == "quorum" else {}

    def task_binding(self, task_type: str) -> str:
        return f"#.@.{self.task_queue(task_type)}"

    def bindings(self) -> Iterator[tuple[str, str, str, bool]]:
        """``(source exchange, destination, routing pattern, destination is an exchange)`` for the levels."""
        for level in range(self.levels):
            # entry: the highest set bit is ``level`` (exactly level + 1 digits, then "@")
            yield self.entry_exchange, self.level_queue(level), ".".join(["*"] * level + ["1", "@", "#"]), False
        for after in range(1, self.levels):
            source = self.level_exchange(after)
            for below in range(after):  # the next set bit under ``after`` is ``below``
                pattern = ".".join(["*"] * below + ["1"] + ["0"] * (after - 1 - below) + ["#"])
                yield source, self.level_queue(below), pattern, False
            yield source, self.tasks_exchange, ".".join(["0"] * after + ["#"]), True

    def route(self, task_type: str, delay_ms: float) -> tuple[str, str, bool]:
        """``(exchange, routing key, truncated)`` for a message due in ``delay_ms``; never early."""
        units = math.ceil(delay_ms / self.unit_ms) if delay_ms > 0 else 0
        truncated = units >= 2**self.levels
        if truncated:
            units = 2**self.levels - 1
        if units == 0:
            return self.tasks_exchange, f"@.{self.task_queue(task_type)}", False
        digits = []
        while units:
            digits.append("1" if units & 1 else "0")
            units >>= 1
        return self.entry_exchange, ".".join([*digits, "@", self.task_queue(task_type)]), truncated

    def declare(self, channel: BlockingChannel) -> None:
        """Declare the exchanges, level queues and bindings (idempotent), then the marker."""
        channel.exchange_declare(self.tasks_exchange, "topic", durable=True)
        channel.exchange_declare(self.entry_exchange, "topic", durable=True)
        for level in range(1, self.levels):
            channel.exchange_declare(self.level_exchange(level), "topic", durable=True)
        for level in range(self.levels):
            channel.queue_declare(self.level_queue(level), durable=True, arguments=self.level_arguments(level))
        for source, destination, pattern, to_exchange in self.bindings():
            if to_exchange:
                channel.exchange_bind(destination=destination, source=source, routing_key=pattern)
            else:
                channel.queue_bind(destination, source, routing_key=pattern)
        channel.exchange_declare(self.marker_exchange, "fanout", durable=True)

    def declare_task_queue(self, channel: BlockingChannel, task_type: str) -> None:
        """Declare and bind the task type's queue, and declare its dead-letter queue (a quorum queue)."""
        channel.queue_declare(self.task_queue(task_type), durable=True, arguments=self.task_queue_arguments())
        channel.queue_bind(self.task_queue(task_type), self.tasks_exchange, routing_key=self.task_binding(task_type))
        channel.queue_declare(self.dead_letter_queue(task_type), durable=True, arguments=self.task_queue_arguments())

    def names(self, task_types: Iterable[str] = ()) -> tuple[list[str], list[str]]:
        """``(queues, exchanges)`` of this topology and of ``task_types``' queues (dead-letter ones too)."""
        queues = [self.level_queue(level) for level in range(self.levels)]
        queues += [name for task_type in task_types
                   for name in (self.task_queue(task_type), self.dead_letter_queue(task_type))]
        exchanges = [self.tasks_exchange, self.entry_exchange, self.marker_exchange]
        exchanges += [self.level_exchange(level) for level in range(1, self.levels)]
        return queues, exchanges


@dataclass(frozen=True)
class TaskMessage:
    """One task message: what its properties, headers and body carry."""

    task_id: str
    task_type: str
    payload: str
    run_at_ms: int
    gen: int
    attempt: int
    until_ms: int | None = None  # a delay longer than the levels hold: re-publish until this time
    trace_context: str | None = None  # NewTask.trace_context: JSON text, carried in the HEADER_TRACE header


class Undecodable(ValueError):
    """A delivered message that is not a task message of its queue; the text says what is wrong."""


def decode(task_type: str, properties: pika.BasicProperties, body: bytes) -> TaskMessage:
    """The task message delivered from ``task_type``'s queue, or :class:`Undecodable` naming what is wrong."""
    task_id = properties.message_id
    if not isinstance(task_id, str) or not task_id:
        raise Undecodable(f"no message_id (the task id), got {task_id!r}")
    if properties.type != task_type:
        raise Undecodable(f"type {properties.type!r} is not this queue's task type {task_type!r}")
    headers = properties.headers
    if not isinstance(headers, dict):
        raise Undecodable(f"headers must be a table, got {headers!r}")
    numbers: dict[str, int] = {}
    for name, least, most in ((HEADER_GEN, 1, _MAX_COUNT), (HEADER_ATTEMPT, 1, _MAX_COUNT),
                              (HEADER_RUN_AT, 0, _MAX_TIME_MS), (HEADER_UNTIL, 0, _MAX_TIME_MS)):
        value = headers.get(name)
        if value is None and name == HEADER_UNTIL:
            continue
        if not isinstance(value, int) or isinstance(value, bool) or not least <= value <= most:  # pika's long: int
            raise Undecodable(f"header {name} must be an integer from {least} to {most}, got {value!r}")
        numbers[name] = value
    try:
        payload = body.decode()
        json.loads(payload)
    except UnicodeDecodeError as error:
        raise Undecodable(f"the body is not UTF-8 ({error})") from None
    except ValueError as error:
        raise Undecodable(f"the body is not JSON ({error})") from None
    trace = headers.get(HEADER_TRACE)
    if isinstance(trace, bytes):
        trace = trace.decode(errors="replace")
    trace_text = encode_trace_context(decode_trace_context(trace))  # a malformed one is ignored: the task runs
    return TaskMessage(task_id, task_type, payload, numbers[HEADER_RUN_AT], numbers[HEADER_GEN],
                       numbers[HEADER_ATTEMPT], numbers.get(HEADER_UNTIL), trace_text)


class Received:
    """A message as the broker delivered it from ``queue_name``, the queue of ``task_type``."""

    __slots__ = ("body", "method", "properties", "queue_name", "task_type")

    def __init__(self, task_type: str, queue_name: str, method: Any, properties: pika.BasicProperties,
                 body: bytes) -> None:
        self.task_type = task_type
        self.queue_name = queue_name
        self.method = method
        self.properties = properties
        self.body = body

    @property
    def tag(self) -> int:
        return int(self.method.delivery_tag)


def publish_dead_letter(channel: BlockingChannel, topology: Topology, received: Received, reason: str) -> None:
    """Put a message that its queue could not use into its task type's dead-letter queue.

    The body and properties are kept, with the reason and the source queue added as headers; ``channel``
    confirms deliveries, so this returns once the broker has the copy (or raises).
    """
    properties = received.properties
    copy = pika.BasicProperties(**{name: getattr(properties, name) for name in _PROPERTY_NAMES})
    copy.headers = {**(properties.headers if isinstance(properties.headers, dict) else {}),
                    HEADER_DEAD_REASON: reason, HEADER_DEAD_QUEUE: received.queue_name}
    copy.delivery_mode = pika.DeliveryMode.Persistent.value
    channel.basic_publish("", topology.dead_letter_queue(received.task_type), received.body, copy, mandatory=True)


# Not ``expiration`` (the copy must stay) nor ``user_id`` (the broker refuses one that is not the connection's).
_PROPERTY_NAMES = ("content_type", "content_encoding", "priority", "correlation_id", "reply_to", "message_id",
                   "timestamp", "type", "app_id", "cluster_id")

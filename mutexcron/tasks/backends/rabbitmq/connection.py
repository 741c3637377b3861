"""The RabbitMQ task backend's side of the broker: connecting, declaring queues, publishing with confirms.

:class:`BrokerConnection` is what the backend and its consumers share: the connection settings, the
topology declaration, and one confirming publisher connection per process. See ``docs/rabbitmq.md``.
"""

from __future__ import annotations

import copy
import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, suppress
from typing import Any

import pika
import pika.exceptions
from pika.adapters.blocking_connection import BlockingChannel, BlockingConnection

from ...._common import store_errors, unavailable
from ....errors import StoreConfigError, StoreUnavailable
from ....urls import mask_url
from .topology import (
    HEADER_ATTEMPT,
    HEADER_GEN,
    HEADER_RUN_AT,
    HEADER_TRACE,
    HEADER_UNTIL,
    TaskMessage,
    Topology,
)

__all__ = ["CONNECTION_ERRORS", "BrokerConnection", "Session"]

logger = logging.getLogger("mutexcron.tasks.rabbitmq")

CONNECTION_ERRORS = (pika.exceptions.AMQPError, OSError)
_CONFIG_CODES = (403, 406)  # ACCESS_REFUSED, PRECONDITION_FAILED: settings, not a passing fault


class Session:
    """One connection with a confirming publisher channel (and, for consumers, a consuming channel)."""

    def __init__(self, connection: BlockingConnection) -> None:
        self.connection = connection
        self.publisher = connection.channel()
        self.publisher.confirm_delivery()
        self.declared_types: set[str] = set()
        self.pid = os.getpid()
        self.last_used = time.monotonic()

    def close(self) -> None:
        if self.pid == os.getpid():  # never close a parent's socket from a forked child
            with suppress(*CONNECTION_ERRORS):
                if self.connection.is_open:
                    self.connection.close()


class BrokerConnection:
    """Connection settings, topology and the shared publisher of a RabbitMQ task backend.

    Every method raises :class:`StoreUnavailable` on connection errors and :class:`StoreConfigError` when
    the broker refuses the settings (a queue that exists with other arguments, no access).
    """

    def __init__(
        self, parameters: pika.ConnectionParameters | pika.URLParameters, topology: Topology | None, url: str | None
    ) -> None:
        self.parameters = parameters
        self.topology = topology or Topology()
        self.display = mask_url(url) if url else f"amqp://{parameters.host}:{parameters.port}"
        self._url = url or ""
        self._lock = threading.RLock()
        self._producer: Session | None = None

    # Settings given as ConnectionParameters, not as a URL, cannot be scrubbed: their errors name the class only.

    def unavailable(self, error: BaseException, doing: str) -> StoreUnavailable:
        """``error`` (a client error) as StoreUnavailable naming this broker and what it was ``doing``."""
        where = f"RabbitMQ {self.display}: {doing}"
        return unavailable(error, where, url=self._url or None, name_error=True, detail=bool(self._url))

    def errors(self, doing: str) -> AbstractContextManager[None]:
        """Connection errors inside the block raised as :meth:`unavailable` makes them."""
        where = f"RabbitMQ {self.display}: {doing}"
        return store_errors(CONNECTION_ERRORS, where, url=self._url or None, name_error=True, detail=bool(self._url))

    @contextmanager
    def refusals(self) -> Iterator[None]:
        """The broker refusing the settings (a channel closed with 403 or 406) inside the block raised as
        StoreConfigError; its other channel closures propagate (connection errors)."""
        try:
            yield
        except pika.exceptions.ChannelClosedByBroker as error:
            if error.reply_code in _CONFIG_CODES:
                raise self._config_error(error) from error
            raise

    def _config_error(self, error: pika.exceptions.ChannelClosedByBroker) -> StoreConfigError:
        hint = ""
        if error.reply_code == 406:
            hint = (
                " (a queue or exchange of that name exists with other settings: another queue_type, levels "
                "or unit_ms; delete it or choose another ?prefix=)"
            )
        return StoreConfigError(f"RabbitMQ {self.display}: {error.reply_code} {error.reply_text}{hint}")

    def connect(self, *, heartbeat: int | None = None) -> Session:
        """A new connection with the delay topology declared (``heartbeat``: seconds, else the URL's)."""
        parameters = self.parameters
        if heartbeat is not None:
            parameters = copy.copy(parameters)
            parameters.heartbeat = heartbeat
        with self.errors("cannot connect"):
            session = Session(BlockingConnection(parameters))
        try:
            self._ensure_topology(session)
        except BaseException:
            session.close()
            raise
        return session

    def _ensure_topology(self, session: Session, *, force: bool = False) -> None:
        """Declare the levels unless the marker shows that they exist with these settings."""
        topology = self.topology
        with self.errors("cannot declare the delay queues"), self.refusals():
            if not force:
                probe = session.connection.channel()
                try:
                    probe.exchange_declare(topology.marker_exchange, "fanout", passive=True)
                    probe.close()
                    return
                except pika.exceptions.ChannelClosedByBroker as error:
                    if error.reply_code != 404:
                        raise
            setup = session.connection.channel()
            topology.declare(setup)
            setup.close()

    def declare_task_types(self, session: Session, task_types: Iterable[str]) -> None:
        """Declare the queues of ``task_types`` (already checked by the caller) not yet declared on ``session``."""
        for task_type in task_types:
            if task_type in session.declared_types:
                continue
            with self.errors(f"cannot declare the queue of {task_type!r}"), self.refusals():
                self.topology.declare_task_queue(session.publisher, task_type)
            session.declared_types.add(task_type)

    def publish_on(self, session: Session, message: TaskMessage, delay_ms: float) -> None:
        """Publish ``message`` on ``session`` (a consumer's), due in ``delay_ms``; returns once confirmed."""
        self.declare_task_types(session, [message.task_type])
        self._publish(session.publisher, message, delay_ms)

    def _publish(self, channel: BlockingChannel, message: TaskMessage, delay_ms: float) -> None:
        exchange, routing_key, truncated = self.topology.route(message.task_type, delay_ms)
        headers: dict[str, Any] = {
            HEADER_GEN: message.gen, HEADER_ATTEMPT: message.attempt, HEADER_RUN_AT: message.run_at_ms,
        }
        if truncated:  # the consumer re-publishes it until this time
            headers[HEADER_UNTIL] = message.run_at_ms
        if message.trace_context is not None:
            headers[HEADER_TRACE] = message.trace_context
        properties = pika.BasicProperties(
            content_type="application/json", delivery_mode=pika.DeliveryMode.Persistent,
            message_id=message.task_id, type=message.task_type, timestamp=int(time.time()), app_id="mutexcron",
            headers=headers,
        )
        channel.basic_publish(exchange, routing_key, message.payload.encode(), properties, mandatory=True)

    @contextmanager
    def _producing(self) -> Iterator[Session]:
        """The shared publisher connection (lock held): made on first use, after a fork, or when closed."""
        with self._lock:
            producer = self._producer
            if producer is not None and (producer.pid != os.getpid() or not producer.connection.is_open):
                producer.close()
                producer = self._producer = None
            if producer is not None and time.monotonic() - producer.last_used > 5:
                try:  # an idle connection: read what the broker sent (heartbeats, or that it closed us)
                    producer.connection.process_data_events(0)
                except CONNECTION_ERRORS:
                    producer.close()
                    producer = self._producer = None
            if producer is None:
                producer = self._producer = self.connect()
            try:
                yield producer
            except BaseException:
                if not producer.connection.is_open or not producer.publisher.is_open:
                    producer.close()
                    self._producer = None
                raise
            producer.last_used = time.monotonic()

    def _publish_with_retry(
        self, messages: Sequence[TaskMessage], delay_ms: Callable[[TaskMessage], float],
        confirmed: list[str] | None = None,
    ) -> None:
        """Publish with confirms on the shared connection, retrying once on a new connection.

        ``confirmed`` receives the id of each message as the broker confirms it (also when this raises).
        """
        confirmed = [] if confirmed is None else confirmed
        done = len(confirmed)
        for attempt in (1, 2):
            try:
                with self._producing() as producer:
                    self.declare_task_types(producer, {message.task_type for message in messages})
                    for message in messages[len(confirmed) - done:]:
                        self._publish(producer.publisher, message, delay_ms(message))
                        confirmed.append(message.task_id)
                return
            except (pika.exceptions.ChannelClosedByBroker, pika.exceptions.UnroutableError) as error:
                code = getattr(error, "reply_code", None)
                if code in _CONFIG_CODES:
                    raise self._config_error(error) from error
                if attempt == 2:
                    raise self.unavailable(error, "cannot publish") from error
                if code is None or code == 404:  # a task queue, or the delay topology, was deleted under us
                    with self._producing() as producer:
                        producer.declared_types.clear()
                        self._ensure_topology(producer, force=True)
            except CONNECTION_ERRORS as error:
                if attempt == 2:
                    raise self.unavailable(error, "cannot publish") from error
                logger.info("RabbitMQ %s: publisher connection lost (%s); reconnecting", self.display, error)

    def close_producer(self) -> None:
        """Close the shared publisher connection (the next publish opens a new one)."""
        with self._lock:
            if self._producer is not None:
                self._producer.close()
                self._producer = None

    def delete_topology(self, task_types: Iterable[str] = ()) -> None:
        """Delete the level queues and exchanges, and the queues of ``task_types`` (tests, changing settings).

        Messages waiting in them are lost.
        """
        self.close_producer()
        queues, exchanges = self.topology.names(task_types)
        with self.errors("cannot connect"):
            connection = BlockingConnection(self.parameters)
        try:
            with self.errors("cannot delete the topology"):
                channel = connection.channel()
                for name in queues:
                    channel.queue_delete(name)
                for name in exchanges:
                    channel.exchange_delete(name)
        finally:
            with suppress(*CONNECTION_ERRORS):
                connection.close()

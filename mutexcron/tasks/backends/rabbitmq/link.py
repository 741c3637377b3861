"""A RabbitMQ consumer's connection, in an I/O thread of its own so that heartbeats go on while a handler runs.

The consumer's thread reads deliveries from :attr:`ConsumerLink.inbox` and asks the I/O thread to ack
and publish (:meth:`ConsumerLink.call`); pika connections are not thread-safe. See ``docs/rabbitmq.md``.
"""

from __future__ import annotations

import functools
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import suppress
from typing import Any

import pika
import pika.exceptions

from ....errors import StoreConfigError, StoreUnavailable
from .connection import CONNECTION_ERRORS, BrokerConnection, Session
from .topology import Received, TaskMessage, publish_dead_letter

__all__ = ["LOST", "WAKE", "ConsumerLink", "LiveLinks"]

WAKE = object()  # in the inbox: look at the stop event now
LOST = object()  # in the inbox: the connection ended; ConsumerLink.lost() says why


class ConsumerLink:
    """A consumer's connection, owned by an I/O thread of its own.

    pika connections are not thread-safe, and a BlockingConnection sends heartbeats only while its thread
    is inside pika. A handler may run for minutes in consume()'s thread; if it ran in the connection's
    thread, the broker would drop the silent connection after the heartbeat timeout and hand the task to
    another worker while the first still runs it. So this thread does nothing but pika: it waits in
    ``process_data_events``, puts deliveries into ``inbox``, and runs the acks and publishes that
    consume()'s thread posts with ``add_callback_threadsafe`` (:meth:`call`).
    """

    def __init__(self, broker: BrokerConnection, types: list[str], prefetch: int, heartbeat: int) -> None:
        self.broker = broker
        self.inbox: queue.SimpleQueue[Received | object] = queue.SimpleQueue()
        self._types = types
        self._prefetch = prefetch
        self._heartbeat = heartbeat
        self._session: Session | None = None
        self.connected = False  # the AMQP connection was made (what failed after it is worth retrying)
        self.channel: Any = None
        self._error: BaseException | None = None
        self._closing = False
        self._cancelled: str | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, name="mutexcron-rabbitmq-io", daemon=True)

    def open(self) -> None:
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self.lost()

    def _run(self) -> None:
        try:
            self._session = session = self.broker.connect(heartbeat=self._heartbeat)
            self.connected = True
            self.broker.declare_task_types(session, self._types)
            self.channel = session.connection.channel()
            self.channel.basic_qos(prefetch_count=self._prefetch)
            self.channel.add_on_cancel_callback(self._on_cancelled)
            topology = self.broker.topology
            for task_type in self._types:
                name = topology.task_queue(task_type)
                self.channel.basic_consume(name, functools.partial(self._on_message, task_type, name))
        except BaseException as error:
            self._error = error
            if self._session is not None:
                self._session.close()
            self._ready.set()
            return
        self._ready.set()
        try:
            while not self._closing:
                session.connection.process_data_events(time_limit=None)  # until I/O or a posted call
                # A channel closed by the broker (its consumer_timeout, an ack it refused) only wakes the
                # loop; pika raises it from start_consuming(), which this loop does not use. So look.
                for channel in (self.channel, session.publisher):
                    if channel.is_closed and not self._closing:
                        reason = getattr(channel, "_closing_reason", None) or "closed"
                        raise pika.exceptions.ChannelClosed(0, f"channel {channel.channel_number} closed: {reason}")
                if self._cancelled is not None:
                    raise pika.exceptions.ChannelClosed(0, f"the broker cancelled the consumer ({self._cancelled})")
        except BaseException as error:
            if not self._closing:
                self._error = error
        finally:
            session.close()
            self.inbox.put(LOST)

    def _on_message(self, task_type: str, queue_name: str, _channel: Any, method: Any,
                    properties: pika.BasicProperties, body: bytes) -> None:
        self.inbox.put(Received(task_type, queue_name, method, properties, body))

    def _on_cancelled(self, method_frame: Any) -> None:
        """The broker cancelled a consumer (its queue was deleted): start over, which declares it again."""
        self._cancelled = getattr(method_frame.method, "consumer_tag", "?")
        assert self._session is not None
        self._session.connection.add_callback_threadsafe(_noop)

    def lost(self) -> StoreUnavailable | StoreConfigError:
        """Why the connection ended (or could not be made), as the error to raise."""
        error = self._error
        if isinstance(error, StoreUnavailable | StoreConfigError):
            return error
        if error is None:
            return StoreUnavailable(f"RabbitMQ {self.broker.display}: the consumer connection closed")
        return self.broker.unavailable(error, "consumer connection lost")

    def call(self, function: Callable[[], Any]) -> Any:
        """Run ``function`` in the I/O thread and return its result (or raise its error)."""
        done = threading.Event()
        outcome: dict[str, Any] = {}

        def run() -> None:
            try:
                outcome["value"] = function()
            except BaseException as error:
                outcome["error"] = error
            finally:
                done.set()

        session = self._session
        if session is None:
            raise self.lost()
        with self.broker.errors("consumer connection lost"):
            session.connection.add_callback_threadsafe(run)
        while not done.wait(1.0):
            if not self._thread.is_alive() and not done.is_set():
                raise self.lost()
        if "error" in outcome:
            failure = outcome["error"]
            if isinstance(failure, StoreUnavailable | StoreConfigError):
                raise failure
            if isinstance(failure, CONNECTION_ERRORS):
                raise self.broker.unavailable(failure, "consumer connection lost") from failure
            raise failure
        return outcome.get("value")

    def ack(self, tag: int) -> None:
        self.call(lambda: self.channel.basic_ack(tag))

    def requeue(self, tag: int) -> None:
        """Give the delivery back to the queue unsettled (the broker redelivers it, marked redelivered)."""
        self.call(lambda: self.channel.basic_nack(tag, requeue=True))

    def publish(self, message: TaskMessage, delay_ms: float) -> None:
        """Publish ``message`` on this connection, due in ``delay_ms``; returns once the broker confirmed it."""
        def run() -> None:
            assert self._session is not None
            self.broker.publish_on(self._session, message, delay_ms)

        self.call(run)

    def dead_letter(self, received: Received, reason: str) -> None:
        """Copy a message no consumer can use to its type's dead-letter queue and wait for the broker's confirm."""
        def run() -> None:
            assert self._session is not None
            self.broker.declare_task_types(self._session, [received.task_type])
            publish_dead_letter(self._session.publisher, self.broker.topology, received, reason)

        self.call(run)

    def wake(self) -> None:
        self.inbox.put(WAKE)

    def close(self) -> None:
        self._closing = True
        session = self._session
        if session is not None:
            with suppress(Exception):
                session.connection.add_callback_threadsafe(_noop)
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(10)


class LiveLinks:
    """A backend's live links, which its ``wake()`` wakes: each consume() call adds its link while it is open,
    from its own thread, so the set is guarded by a lock."""

    def __init__(self) -> None:
        self._links: set[ConsumerLink] = set()
        self._lock = threading.Lock()

    def add(self, link: ConsumerLink) -> None:
        with self._lock:
            self._links.add(link)

    def discard(self, link: ConsumerLink) -> None:
        with self._lock:
            self._links.discard(link)

    def wake(self) -> None:
        """Wake every live link's consumer (outside the lock: a link's wake() only puts into its inbox)."""
        for link in self:
            link.wake()

    def __iter__(self) -> Iterator[ConsumerLink]:
        with self._lock:
            return iter(list(self._links))

    def __len__(self) -> int:
        with self._lock:
            return len(self._links)

    def __contains__(self, link: object) -> bool:
        with self._lock:
            return link in self._links


def _noop() -> None:
    return None

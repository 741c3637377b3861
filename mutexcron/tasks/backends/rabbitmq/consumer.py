"""One consume() call of the RabbitMQ task backend: the message's way from the task queue to the handler.

:class:`TaskConsumer` (re)connects a :class:`~.link.ConsumerLink`, decodes each delivered
message, claims its task record and hands a :class:`RabbitDelivery` to the handler; the delivery settles
through the record store and the link only. See ``docs/rabbitmq.md``.
"""

from __future__ import annotations

import logging
import os
import queue
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from ...._common import duration_ms, epoch_ms, ms_to_datetime
from ....errors import StoreUnavailable
from ...model import TaskStatus, decode_trace_context
from ...records.base import RecordDataError, TaskRecordStore, Verdict
from ..base import ConsumeRequest, Delivery
from ..outage import WorkerOutage
from .connection import BrokerConnection
from .link import LOST, WAKE, ConsumerLink, LiveLinks
from .topology import Received, TaskMessage, Undecodable, decode

__all__ = ["RabbitDelivery", "TaskConsumer"]

logger = logging.getLogger("mutexcron.tasks.rabbitmq")

_POLL_SECONDS = 0.5  # the longest wait for a delivery: how soon a stop set without wake() is seen
_RECONNECT_BACKOFF = (0.5, 30.0)
# A message that comes at most this early (on the worker's clock) waits in the worker until it is due. The
# quorum level queues' TTLs expire a message a few ms early now and then; a larger gap is taken to be the
# clocks' skew, and the message runs at once rather than hold the queue behind it.
HOLD_EARLY_MS = 100


class TaskConsumer:
    """Delivers the tasks of ``request.types`` to ``request.handle`` in the calling thread, on one link at a time.

    ``links`` are the backend's live links, which its ``wake()`` wakes; ``request.cancelled(task_type)`` is told
    of each cancelled task dropped unrun.
    """

    def __init__(self, broker: BrokerConnection, records: TaskRecordStore, request: ConsumeRequest, *,
                 heartbeat: int, links: LiveLinks) -> None:
        self.broker = broker
        self.records = records
        self.types = request.types
        self.prefetch = max(1, request.prefetch)
        self.heartbeat = heartbeat
        self._request = request
        self._links = links
        self._cancelled = request.cancelled

    def run(self) -> None:
        """Until ``request.stop`` is set; a link that cannot be made (the broker is down, also when the worker
        starts) or is lost is made again with backoff, the outage logged once."""
        handle, stop = self._request.handle, self._request.stop
        backoff = _RECONNECT_BACKOFF[0]
        outage = WorkerOutage(f"{socket.gethostname()}:{os.getpid()}")
        while not stop.is_set():
            link = ConsumerLink(self.broker, self.types, self.prefetch, self.heartbeat)
            self._links.add(link)
            started = time.monotonic()
            try:
                link.open()
                outage.answered()
                self._serve(link, handle, stop)
                return
            except StoreUnavailable as error:
                if link.connected:
                    # A link lost, or a set-up that failed after connecting: RabbitMQ 3.10 closes a channel that
                    # consumes from a quorum queue declared a moment before by another worker, before its Raft
                    # server is up.
                    logger.warning("task consumer: %s; reconnecting in %.1f s", error, backoff)
                else:  # the broker cannot be reached: an outage, logged when it begins and when it ends
                    outage.failed(error, backoff)
            finally:
                self._links.discard(link)
                link.close()  # unacked deliveries (prefetched, not started) go back to the queue
            if time.monotonic() - started > 30:
                backoff = _RECONNECT_BACKOFF[0]
            if stop.wait(backoff):
                return
            backoff = min(backoff * 2, _RECONNECT_BACKOFF[1])

    def _serve(self, link: ConsumerLink, handle: Callable[[Delivery], None], stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                item = link.inbox.get(timeout=_POLL_SECONDS)  # a blocking wait; wake() cuts it short
            except queue.Empty:
                continue
            if item is WAKE:
                continue
            if item is LOST:
                raise link.lost()
            assert isinstance(item, Received)
            self._deliver(link, item, handle, stop)

    def _deliver(self, link: ConsumerLink, received: Received, handle: Callable[[Delivery], None],
                 stop: threading.Event) -> None:
        try:
            message = decode(received.task_type, received.properties, received.body)
        except Undecodable as error:  # kept for an operator, then acked: it cannot stop the queue behind it
            self._dead_letter(link, received, f"cannot be decoded: {error}")
            return
        if message.until_ms is not None and message.until_ms - time.time() * 1000 >= 1:  # a long delay: one more pass
            link.publish(message, message.until_ms - time.time() * 1000)
            link.ack(received.tag)
            return
        early_ms = message.run_at_ms - time.time() * 1000
        if 0 < early_ms <= HOLD_EARLY_MS:
            logger.debug("task %s (%s) came %.1f ms early; held until due", message.task_id, message.task_type,
                         early_ms)
            if stop.wait(early_ms / 1000):
                return  # stopping: left unacked, the link's close puts it back in the queue
        redelivered = bool(received.method.redelivered)
        try:
            claim = self.records.claim(message.task_id, gen=message.gen, attempt=message.attempt,
                                       redelivered=redelivered)
        except RecordDataError as error:  # an id no record can have: bad data, which requeueing would never cure
            self._dead_letter(link, received, f"cannot be decoded: message_id is no task id the record store can "
                                              f"keep ({error})")
            return
        if claim.verdict == Verdict.MISSING:  # it may have been cancelled: run nothing without a record
            self._dead_letter(link, received,
                              "has no task record (never scheduled, discarded after a failed publish, or lost)")
            return
        if claim.verdict != Verdict.RUN:
            logger.debug("task %s (%s) generation %d: %s; dropped", message.task_id, message.task_type,
                         message.gen, claim.verdict)
            link.ack(received.tag)
            if claim.verdict == Verdict.CANCELLED and self._cancelled is not None:
                self._cancelled(message.task_type)
            return
        delivery = RabbitDelivery(self.records, link, received.tag, message, claim.attempts)
        handle(delivery)
        if not delivery.settled:
            logger.error("task %s (%s): the handler settled nothing; it goes back to the queue", message.task_id,
                         message.task_type)
            delivery.release()

    def _dead_letter(self, link: ConsumerLink, received: Received, reason: str) -> None:
        """Log once, copy the message to the type's dead-letter queue (confirmed), then ack the original."""
        logger.error("task consumer: queue %s: message %s %s; moved to %s", received.queue_name,
                     received.properties.message_id or f"(delivery tag {received.tag})", reason,
                     self.broker.topology.dead_letter_queue(received.task_type))
        link.dead_letter(received, reason)
        link.ack(received.tag)


class RabbitDelivery(Delivery):
    """A claimed task message: settling it moves its record in the record store, then acks the message."""

    def __init__(self, records: TaskRecordStore, link: ConsumerLink, tag: int, message: TaskMessage,
                 attempt: int) -> None:
        self.id = message.task_id
        self.task_type = message.task_type
        self.payload = message.payload
        self.attempt = attempt
        self.due = ms_to_datetime(message.run_at_ms)
        self.trace_context = decode_trace_context(message.trace_context)
        self._message = message
        self._records = records
        self._link = link
        self._tag = tag
        self._gen = message.gen
        self.settled = False

    def _settle(self) -> None:
        if self.settled:
            raise RuntimeError(f"task {self.id}: the delivery was already acked, retried or failed")
        self.settled = True

    def ack(self) -> None:
        self._settle()
        self._records.finish(self.id, gen=self._gen, status=TaskStatus.SUCCEEDED)
        self._link.ack(self._tag)  # if this fails, the redelivered message is dropped as done

    def retry_later(self, delay: timedelta, error: str) -> None:
        self._settle()
        delay_ms = duration_ms(delay)
        run_at = datetime.now(UTC) + timedelta(milliseconds=delay_ms)
        retry = TaskMessage(self.id, self.task_type, self.payload, epoch_ms(run_at), self._gen + 1, self.attempt + 1,
                            trace_context=self._message.trace_context)
        # Publish, then move the record, then ack: a crash in between reruns the original, never loses it.
        self._link.publish(retry, delay_ms)
        self._records.reschedule(self.id, gen=self._gen, new_gen=self._gen + 1, run_at=run_at, error=error)
        self._link.ack(self._tag)

    def fail(self, error: str) -> None:
        self._settle()
        self._records.finish(self.id, gen=self._gen, status=TaskStatus.FAILED, error=error)
        self._link.ack(self._tag)

    def release(self) -> None:
        """Give the message back to the queue unrun; the broker redelivers it at once, and its claim then
        counts this attempt, as for a consumer that died (the record is left ``running``)."""
        self._settle()
        self._link.requeue(self._tag)

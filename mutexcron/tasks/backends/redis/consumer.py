"""How a Redis task worker receives tasks: its consume() loop, its deliveries, and their claims' heartbeat.

A worker claims a batch (one Lua call), runs it, and otherwise sleeps on the backend's wake channel until
the earliest moment anything could change for it. Every change a delivery makes goes through the
backend's claim methods (``ack_claim``, ``retry_claim_later``, …), fenced by the delivery's ``token``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Protocol

import redis

from ...._common import duration_ms
from ....errors import StoreUnavailable
from ....redis.client import AnyRedis
from ....redis.client import text as _text
from ....redis.urls import REDIS_ERRORS, is_cluster
from ..base import ClaimedDelivery, ClaimHeartbeat, ClaimingConsumer, ConsumeRequest, run_batch

__all__ = ["RedisClaims", "RedisConsumer", "RedisDelivery", "RedisHeartbeat"]

logger = logging.getLogger("mutexcron.tasks.redis")

STOP_CHECK_SECONDS = 0.25  # a waiting worker notices a set ``stop`` within this, even without wake()


class RedisClaims(Protocol):
    """What a consumer, its deliveries and their heartbeat use of their backend (``backend.RedisTaskBackend``):
    its client and wake channel, and the claim protocol, each settling call fenced by the claim's token (False:
    the claim expired). Declared here so that this module needs nothing of the backend's."""

    client: AnyRedis
    channel: str  # the wake channel every worker of the backend's prefix subscribes to
    max_idle: timedelta  # a worker that knows of nothing due looks again after this

    def errors(self) -> AbstractContextManager[None]: ...


    def claim_batch(
        self, types: list[str], limit: int, owner: str, visibility_ms: list[int]
    ) -> tuple[int, int, list[RedisDelivery]]: ...

    def extend_claims(self, claims: Sequence[tuple[str, str, str, int]]) -> list[bool]: ...

    def ack_claim(self, task_id: str, task_type: str, token: str) -> bool: ...

    def retry_claim_later(self, task_id: str, task_type: str, token: str, delay: timedelta, error: str) -> bool: ...

    def fail_claim(self, task_id: str, task_type: str, token: str, error: str) -> bool: ...

    def release_claim(self, task_id: str, task_type: str, token: str) -> bool: ...


@dataclass(eq=False)
class RedisDelivery(ClaimedDelivery):
    """A claimed task; its ``token`` (the task's claim count) proves the claim is still this worker's."""

    backend: RedisClaims
    id: str
    task_type: str
    payload: str
    attempt: int
    token: str
    visibility_ms: int
    heartbeat: ClaimHeartbeat[RedisDelivery] | None = field(default=None, repr=False)
    due: datetime | None = None
    trace_context: Mapping[str, str] | None = field(default=None, repr=False)

    @property
    def visibility_seconds(self) -> float:
        return self.visibility_ms / 1000

    def ack(self) -> None:
        self.settle("ack", lambda: self.backend.ack_claim(self.id, self.task_type, self.token))

    def retry_later(self, delay: timedelta, error: str) -> None:
        self.settle("schedule a retry of",
                    lambda: self.backend.retry_claim_later(self.id, self.task_type, self.token, delay, error))

    def fail(self, error: str) -> None:
        self.settle("fail", lambda: self.backend.fail_claim(self.id, self.task_type, self.token, error))

    def release(self) -> None:
        """Give the task back unrun (the worker is stopping): due again at once, this attempt not counted."""
        self.settle("release", lambda: self.backend.release_claim(self.id, self.task_type, self.token))


class RedisHeartbeat(ClaimHeartbeat[RedisDelivery]):
    """Extends the claims due for it with one Lua call per round (see :class:`ClaimHeartbeat`)."""

    def __init__(self, backend: RedisClaims) -> None:
        self.backend = backend
        super().__init__()

    def extend(self, batch: list[RedisDelivery]) -> set[RedisDelivery]:
        kept = self.backend.extend_claims([(d.id, d.task_type, d.token, d.visibility_ms) for d in batch])
        return {delivery for delivery, ok in zip(batch, kept, strict=True) if ok}


class RedisConsumer(ClaimingConsumer):
    """One consume() call: claim, run, and sleep on the wake channel until something may be due."""

    def __init__(self, backend: RedisClaims, request: ConsumeRequest) -> None:
        super().__init__(request)
        self.backend = backend
        self.private_channel = f"{backend.channel}:{self.token}"

    def run(self) -> None:
        self._pubsub: Any = None
        self._channel_lost = False
        heartbeat = RedisHeartbeat(self.backend)
        try:
            # Subscribed (confirmed) before the first claim: no wake-up published after it can be missed.
            self._pubsub = self._subscribed_once_reachable()
            if self._pubsub is None:
                return  # stopped while the store was unreachable
            self._loop(self._pubsub, heartbeat)
        finally:
            heartbeat.close()
            if self._pubsub is not None:
                with contextlib.suppress(*REDIS_ERRORS):
                    self._pubsub.close()

    def _subscribed_once_reachable(self) -> Any:
        """A PubSub subscribed to the wake channels, made as soon as the store answers (None if ``stop`` is set
        first): a worker started while Redis is down waits for it."""
        while not self.stop.is_set():
            pubsub = None
            try:
                with self.backend.errors():
                    pubsub = self._new_pubsub()
                    self._subscribe(pubsub)
                return pubsub
            except StoreUnavailable as error:
                if pubsub is not None:
                    with contextlib.suppress(*REDIS_ERRORS):
                        pubsub.close()
                self.store_failed(error)
        return None

    def _new_pubsub(self) -> Any:
        """A PubSub of the backend's client (Any: redis-py annotates pubsub() only from 8.2 on)."""
        client: Any = self.backend.client
        return client.pubsub()

    def _resubscribe(self) -> Any:
        """A cluster's pub/sub connection is to one node: when it fails (the node died, a failover), subscribe
        anew, on a node that answers. Until that works the worker looks for tasks at least every second."""
        with contextlib.suppress(*REDIS_ERRORS):
            self._pubsub.close()
        try:
            with self.backend.errors():
                self._pubsub = self._new_pubsub()
                self._subscribe(self._pubsub)
            self._channel_lost = False
        except StoreUnavailable as error:
            logger.debug("task worker %s: cannot subscribe yet: %s", self.owner, error)
        return self._pubsub

    def wake(self) -> None:
        try:
            self.backend.client.publish(self.private_channel, "wake")
        except REDIS_ERRORS as error:  # the waiting worker notices ``stop`` by itself soon anyway
            logger.debug("could not wake %s: %s", self.private_channel, error)

    def _subscribe(self, pubsub: Any) -> None:
        pubsub.subscribe(self.backend.channel, self.private_channel)
        confirmed = 0
        deadline = time.monotonic() + 10
        while confirmed < 2:
            if time.monotonic() > deadline:
                raise redis.TimeoutError("no confirmation of SUBSCRIBE")
            message = pubsub.get_message(timeout=1.0)
            if message is not None and message["type"] == "subscribe":
                confirmed += 1

    def _loop(self, pubsub: Any, heartbeat: RedisHeartbeat) -> None:
        while not self.stop.is_set():
            if self._channel_lost and is_cluster(self.backend.client):
                pubsub = self._resubscribe()
            self._drain(pubsub)
            claimed_at = time.monotonic()
            try:
                visibility = [duration_ms(self.visibility_timeout(t)) for t in self.types]
                now_ms, next_ms, deliveries = self.backend.claim_batch(self.types, self.limit, self.owner, visibility)
            except StoreUnavailable as error:
                self.store_failed(error)
                continue
            self.store_answered()
            answered_at = time.monotonic()
            for delivery in deliveries:
                heartbeat.track(delivery, claimed_at)
            if deliveries:
                run_batch(deliveries, self.handle, self.stop, heartbeat, self.owner)
                continue
            self._sleep(pubsub, now_ms, next_ms, answered_at)

    def _drain(self, pubsub: Any) -> None:
        """Drop the wake-ups already received: the claim about to run sees what they announced.

        (Wake-ups that arrived while handlers ran would otherwise each cost an empty claim.)
        """
        try:
            for _ in range(10_000):
                if pubsub.get_message(timeout=0) is None:
                    return
        except REDIS_ERRORS:
            return  # the claim or the next wait reports it

    def _sleep(self, pubsub: Any, now_ms: int, next_ms: int, answered_at: float) -> None:
        """Wait until ``next_ms`` (server clock; -1: nothing known), a sooner wake-up, wake() or stop."""
        if next_ms < 0:
            deadline = answered_at + self.backend.max_idle.total_seconds()
        else:
            deadline = answered_at + max(0, next_ms - now_ms) / 1000
        while not self.stop.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return
            try:
                message = pubsub.get_message(timeout=min(remaining, STOP_CHECK_SECONDS))
            except REDIS_ERRORS as error:
                if not self._channel_lost:
                    logger.warning("task worker %s: wake-up channel: %s", self.owner, error)
                self._channel_lost = True
                self.stop.wait(min(max(remaining, 0), 1.0))
                return
            if message is None:
                if self._channel_lost and time.monotonic() - answered_at >= 1.0:
                    return  # not subscribed (yet) again: look for tasks at least every second
                continue
            if message["type"] == "subscribe":
                self._channel_lost = False
                return  # re-subscribed after a reconnect: wake-ups may have been lost meanwhile, look now
            if message["type"] != "message":
                continue
            if _text(message["channel"]) == self.private_channel:
                return
            due_text, _, task_type = _text(message["data"]).partition(" ")
            if task_type == "*" or task_type in self.type_set:
                try:
                    due = int(due_text)
                except ValueError:
                    return
                deadline = min(deadline, answered_at + (due - now_ms) / 1000)

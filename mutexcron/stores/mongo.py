"""Locks in MongoDB: one document per job. Seed, acquire, renew and release are each a single atomic update on the
server's clock (one round trip; a refused acquire takes a second one to read why); the control verbs read a document
and write it back with one compare-and-set on its ``revision``, which every write bumps (ControlStore).

A deleted lock keeps its document with ``deleted: true`` (a tombstone hidden from readers), so its token,
last fire time, lease, pause and schedule override survive; seeding or acquiring revives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import fields, replace
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar

from bson.codec_options import CodecOptions
from pymongo import ReturnDocument, UpdateOne
from pymongo.collection import Collection
from pymongo.errors import (
    BulkWriteError,
    DuplicateKeyError,
    OperationFailure,
    PyMongoError,
)
from pymongo.write_concern import WriteConcern

from .._common import as_utc, store_errors
from ..urls import mask_url
from .base import (
    AcquireStatus,
    Acquisition,
    LockState,
    LockStore,
    check_outcome,
    datetime_to_ms,
    duration_ms,
    ms_to_datetime,
)
from .control import ControlStore
from .mongo_url import collection_from_url

__all__ = ["MongoLockStore"]

_DUPLICATE_KEY = 11000

# Seed, acquire, renew and release are aggregation pipelines (or classic updates with $currentDate) reading "$$NOW",
# so that leases run on the MongoDB server's clock, not on the clocks of the instances (which may disagree by
# seconds). "$$NOW" is one value for the whole operation, so the filter and the update agree on it.
_VISIBLE = {"deleted": {"$ne": True}}  # documents written before tombstones existed have no "deleted"
# Why an acquire is refused, as expressions (a missing field compares below null, null below any date).
_NO_UNTIL = {"$eq": [{"$ifNull": ["$paused_until", None]}, None]}
_PAUSED = {"$and": [{"$eq": ["$paused", True]}, {"$or": [_NO_UNTIL, {"$gt": ["$paused_until", "$$NOW"]}]}]}
_HELD = {"$and": [{"$eq": ["$locked", True]}, {"$gt": ["$lock_until", "$$NOW"]}]}
# The overlap slot is live (changes.live_slot): claimed less than its lease ago, for a tick not yet taken.
_SLOT_LIVE = {"$and": [{"$gt": ["$next_until", "$$NOW"]},
                       {"$gt": [{"$ifNull": ["$next_fire", None]}, {"$ifNull": ["$last_fire_time", None]}]}]}
# The next revision, in a pipeline (a document from before revisions has none: 0).
_NEXT_REVISION = {"$add": [{"$ifNull": ["$revision", 0]}, 1]}

P = ParamSpec("P")
T = TypeVar("T")

Document = dict[str, Any]


class MongoLockStore(LockStore, ControlStore):
    """Lock documents in one collection, ``_id`` = job name. Writes use write concern ``majority`` so a
    lock survives a primary failover; datetimes are read back as aware UTC whatever the client's options."""

    def __init__(self, collection: Collection[Document], *, url: str | None = None) -> None:
        codec_options: CodecOptions[Document] = collection.codec_options.with_options(tz_aware=True, tzinfo=UTC)
        self.collection: Collection[Document] = collection.with_options(
            codec_options=codec_options, write_concern=WriteConcern("majority")
        )
        self._url = url
        self._display = mask_url(url) if url else f"{collection.database.name}.{collection.name}"
        self._owns_client = False

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> MongoLockStore:
        """``mongodb://[user:pass@]host[:port][/database][?collection=…&<pymongo options>]``; also ``mongodb+srv://``."""
        store = cls(collection_from_url(url, **client_options), url=url)
        store._owns_client = True
        return store

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        with store_errors(PyMongoError, f"MongoDB store {self._display}", url=self._url):
            return operation(*args, **kwargs)

    def seed(self, names: Iterable[str]) -> int:
        requests = []
        for name in dict.fromkeys(names):  # revive a tombstone, or create a missing document
            revive = {"$set": {"deleted": False}, "$inc": {"revision": 1}}
            requests.append(UpdateOne({"_id": name, "deleted": True}, revive))
            requests.append(UpdateOne({"_id": name}, _insert_only(name), upsert=True))
        if not requests:
            return 0

        def run() -> int:
            try:
                result = self.collection.bulk_write(requests, ordered=False)
                return result.upserted_count + result.modified_count
            except BulkWriteError as error:
                # Two processes upserting the same new _id at once: one insert wins and the other may get
                # E11000 duplicate key. The document exists either way, which is all seeding promises.
                details = error.details
                if details.get("writeConcernErrors") or any(
                    failure.get("code") != _DUPLICATE_KEY for failure in details.get("writeErrors", [])
                ):
                    raise
                return int(details.get("nUpserted", 0)) + int(details.get("nModified", 0))

        return self._call(run)

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None,
                schedule_version: int | None = None) -> Acquisition:
        # Stored at millisecond precision, rounded like the Redis store, so the server's comparison and
        # ours below agree on what "the same fire time" is.
        fire = None if fire_time is None else ms_to_datetime(datetime_to_ms(fire_time))
        reasons: list[tuple[AcquireStatus, Document]] = [(AcquireStatus.PAUSED, _PAUSED)]  # the contract's order
        changes: Document = {
            "locked": {"$literal": True},
            "locked_by": {"$literal": owner},  # $literal: an owner starting with "$" is not a field path
            "last_locked_at": "$$NOW",
            "lock_until": {"$add": ["$$NOW", duration_ms(lease)]},
            "token": {"$add": [{"$ifNull": ["$token", 0]}, 1]},
            "tick_token": {"$add": [{"$ifNull": ["$token", 0]}, 1]},
            "next_fire": {"$literal": None},  # the slot emptied
            "next_until": {"$literal": None},
            "deleted": {"$literal": False},
            "revision": _NEXT_REVISION,
        }
        if schedule_version is not None:
            reasons.append((AcquireStatus.STALE_SCHEDULE, _stale(schedule_version)))
        if fire is not None:
            reasons.append((AcquireStatus.ALREADY_RAN, {"$gte": ["$last_fire_time", fire]}))
            changes["last_fire_time"] = {"$literal": fire}
        reasons.append((AcquireStatus.BUSY, _HELD))
        reasons.append((AcquireStatus.BUSY, {"$and": [_SLOT_LIVE, {"$ne": ["$next_fire", fire]}]}))
        # A run a task worker took over and never released: kept for its tick's retry one more lease (take_over).
        tick = {"$ifNull": ["$tick_token", 0]}
        taken_over = [{"$eq": ["$locked", True]}, {"$ne": [tick, 0]}, {"$ne": [tick, "$token"]},
                      {"$gt": [{"$add": ["$lock_until", duration_ms(lease)]}, "$$NOW"]}]
        reasons.append((AcquireStatus.BUSY, {"$and": taken_over}))
        refusal = _first(reasons)
        query: Document = {"_id": name, "$expr": {"$eq": [refusal, None]}}

        def attempt() -> Document | None:
            return self.collection.find_one_and_update(query, [{"$set": changes}], return_document=ReturnDocument.AFTER)

        for _ in range(3):  # again if the document had to be created, or nothing refuses it any more
            taken = self._call(attempt)
            if taken is not None:
                return Acquisition(AcquireStatus.ACQUIRED, token=int(taken["token"]))
            current = self._refused(name, refusal)
            status = None if current is None else current.get("_refusal")
            if current is None:
                self.seed([name])
            elif status == AcquireStatus.STALE_SCHEDULE:
                return Acquisition(AcquireStatus.STALE_SCHEDULE, schedule_version=_state(current).schedule_version)
            elif status is not None:
                return Acquisition(AcquireStatus(status), holder=current.get("locked_by") or None)
        return Acquisition(AcquireStatus.BUSY)

    def _refused(self, name: str, refusal: Document) -> Document | None:
        """``name``'s document with ``_refusal``: what ``refusal`` (a :func:`_first` of reasons) says of it now."""
        why: list[Document] = [{"$match": {"_id": name}}, {"$addFields": {"_refusal": refusal}}]
        return next(iter(self._call(lambda: list(self.collection.aggregate(why)))), None)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        update = [{"$set": {"lock_until": {"$add": ["$$NOW", duration_ms(lease)]}, "revision": _NEXT_REVISION}}]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        # A plain update when it can be: $currentDate is the server's clock too, and it is cheaper to apply.
        update: Document | list[Document] = {"$set": {"locked": False, "tick_token": 0}, "$inc": {"revision": 1},
                                             "$currentDate": {"lock_until": True, "last_released_at": True}}
        if hold_at_least or outcome is not None:  # a pipeline: one $$NOW for every time it writes
            hold_until = {"$add": ["$last_locked_at", duration_ms(hold_at_least)]}
            still_held = {"$gt": [hold_until, "$$NOW"]}
            changes: Document = {
                "locked": still_held,
                "lock_until": {"$cond": [still_held, hold_until, "$$NOW"]},
                "last_released_at": "$$NOW",
                "tick_token": {"$literal": 0},
                "revision": _NEXT_REVISION,
            }
            if outcome is not None:
                changes |= {"last_outcome": {"$literal": outcome}, "last_finished_at": "$$NOW",
                            "last_error": {"$literal": error}}
                if outcome == "succeeded":
                    changes |= {"last_success_at": "$$NOW", "failures": 0}
            update = [{"$set": changes}]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def read(self, name: str) -> LockState | None:
        document = self._call(self.collection.find_one, {"_id": name})
        return None if document is None else _state(document)

    def locks(self) -> list[LockState]:
        documents = self._call(lambda: list(self.collection.find(_VISIBLE)))
        return sorted((_state(document) for document in documents), key=lambda state: state.name)

    def write(self, state: LockState, *, revision: int) -> bool:
        # A missing document is revision 0 (then upserted), and so is one that seed made (no revision field).
        current = {"$in": [0, None]} if revision == 0 else revision
        values = {field: getattr(state, field) for field in _FIELDS}
        update = {"$set": {**values, "name": state.name, "revision": revision + 1}}

        def run() -> bool:
            try:
                result = self.collection.update_one({"_id": state.name, "revision": current}, update,
                                                    upsert=revision == 0)
            except DuplicateKeyError:  # the document exists at another revision: the upsert tried to insert it
                return False
            return result.matched_count == 1 or result.upserted_id is not None

        return self._call(run)

    def now(self) -> datetime:
        def run() -> datetime:
            database = self.collection.database
            try:
                reply = database.command("hello", codec_options=self.collection.codec_options)
            except OperationFailure:  # servers before 4.4.2 only know isMaster
                reply = database.command("isMaster", codec_options=self.collection.codec_options)
            return _aware(reply["localTime"])

        return self._call(run)

    def close(self) -> None:
        if self._owns_client:
            self.collection.database.client.close()

    def __repr__(self) -> str:
        return f"<MongoLockStore {self._display} collection={self.collection.name!r}>"


def _first(reasons: list[tuple[AcquireStatus, Document]]) -> Document:
    """The first reason that holds, or null: an atomic update's condition, and afterwards what refused it."""
    return {"$switch": {"branches": [{"case": case, "then": status.value} for status, case in reasons],
                        "default": None}}


def _stale(schedule_version: int) -> Document:
    """The document's schedule version is not ``schedule_version`` (one from before overrides is at 0)."""
    return {"$ne": [{"$ifNull": ["$schedule_version", 0]}, schedule_version]}


def _insert_only(name: str) -> list[Document]:
    """An upsert pipeline that makes a new document (created_at = the server's now; no revision: 0) and leaves one
    that exists as it is (every document has a token; an upsert starts from just the ``_id``)."""
    fresh = {
        "_id": "$_id",
        "name": {"$literal": name},  # $literal: a name starting with "$" is not a field path
        "locked": False,
        "locked_by": None,
        "last_locked_at": None,
        "last_released_at": None,
        "lock_until": None,
        "last_fire_time": None,
        "token": {"$literal": 0},
        "created_at": "$$NOW",
    }
    return [{"$replaceWith": {"$cond": [{"$eq": [{"$type": "$token"}, "missing"]}, fresh, "$$ROOT"]}}]


_aware = as_utc  # the server's datetimes (naive ones are UTC) as aware UTC


# The document's fields are LockState's, by name ("name" is the _id; "revision" is write()'s to set).
_FIELDS = [field.name for field in fields(LockState) if field.name not in ("name", "revision")]
_NEVER_LOCKED = LockState("", False, None, None, None, None, None, 0)


def _state(document: Mapping[str, Any]) -> LockState:
    """Null, empty or missing fields (a document from before the field existed) keep LockState's defaults;
    datetimes become aware UTC."""
    values: dict[str, Any] = {
        field: _aware(value) if isinstance(value, datetime) else value
        for field in (*_FIELDS, "revision")
        if (value := document.get(field)) is not None and value != ""
    }
    return replace(_NEVER_LOCKED, name=document["_id"], **values)

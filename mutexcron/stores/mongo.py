"""Locks in MongoDB: one document per job, each operation a single atomic update (one round trip; a
refused acquire takes a second one to read why).

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
    ControlStore,
    LockState,
    LockStore,
    OverlapStore,
    Renewal,
    TakeOverStore,
    check_definition,
    check_incident,
    check_outcome,
    check_pause_note,
    datetime_to_ms,
    duration_ms,
    ms_to_datetime,
)
from .mongo_url import collection_from_url

__all__ = ["MongoLockStore"]

_DUPLICATE_KEY = 11000

# Every update is an aggregation pipeline reading "$$NOW" so that leases run on the MongoDB server's
# clock, not on the clocks of the instances (which may disagree by seconds). "$$NOW" is one value for
# the whole operation, so the filter and the update agree on it.
_VISIBLE = {"deleted": {"$ne": True}}  # documents written before tombstones existed have no "deleted"
# Why an acquire is refused, as expressions (a missing field compares below null, null below any date).
_NO_UNTIL = {"$eq": [{"$ifNull": ["$paused_until", None]}, None]}
_PAUSED = {"$and": [{"$eq": ["$paused", True]}, {"$or": [_NO_UNTIL, {"$gt": ["$paused_until", "$$NOW"]}]}]}
_HELD = {"$and": [{"$eq": ["$locked", True]}, {"$gt": ["$lock_until", "$$NOW"]}]}
# The overlap slot (OverlapStore) is live: claimed less than its lease ago, for a tick not yet taken.
_SLOT_LIVE = {"$and": [{"$gt": ["$next_until", "$$NOW"]}, {"$gt": ["$next_fire", "$last_fire_time"]}]}

P = ParamSpec("P")
T = TypeVar("T")

Document = dict[str, Any]


class MongoLockStore(LockStore, ControlStore, OverlapStore, TakeOverStore):
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
            requests.append(UpdateOne({"_id": name, "deleted": True}, {"$set": {"deleted": False}}))
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
            "deleted": {"$literal": False},
        }
        if schedule_version is not None:
            reasons.append((AcquireStatus.STALE_SCHEDULE, _stale(schedule_version)))
        if fire is not None:
            reasons.append((AcquireStatus.ALREADY_RAN, {"$gte": ["$last_fire_time", fire]}))
            changes["last_fire_time"] = {"$literal": fire}
        reasons.append((AcquireStatus.BUSY, _HELD))
        reasons.append((AcquireStatus.BUSY, {"$and": [_SLOT_LIVE, {"$ne": ["$next_fire", fire]}]}))
        # A run a task worker took over and never released: kept for its tick's retry one more lease (TakeOverStore).
        tick = {"$ifNull": ["$tick_token", 0]}
        taken_over = [{"$eq": ["$locked", True]}, {"$ne": [tick, 0]}, {"$ne": [tick, "$token"]},
                      {"$gt": [{"$add": ["$lock_until", duration_ms(lease)]}, "$$NOW"]}]
        reasons.append((AcquireStatus.BUSY, {"$and": taken_over}))
        changes["next_fire"] = {"$literal": None}
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

    def take_over(self, name: str, *, tick_token: int, owner: str, lease: timedelta,
                  schedule_version: int | None = None) -> Acquisition:
        gone = {"$or": [{"$eq": ["$deleted", True]}, {"$ne": ["$locked", True]},
                        {"$ne": [{"$ifNull": ["$tick_token", 0]}, tick_token]}]}
        reasons = [(AcquireStatus.ALREADY_RAN, gone), (AcquireStatus.PAUSED, _PAUSED)]
        if schedule_version is not None:
            reasons.append((AcquireStatus.STALE_SCHEDULE, _stale(schedule_version)))
        reasons.append((AcquireStatus.BUSY, {"$and": [{"$ne": ["$token", tick_token]}, _HELD]}))
        refusal = _first(reasons)
        changes = {"locked_by": {"$literal": owner}, "lock_until": {"$add": ["$$NOW", duration_ms(lease)]},
                   "token": {"$add": ["$token", 1]}}
        taken = self._call(self.collection.find_one_and_update, {"_id": name, "$expr": {"$eq": [refusal, None]}},
                           [{"$set": changes}], return_document=ReturnDocument.AFTER)
        if taken is not None:
            return Acquisition(AcquireStatus.ACQUIRED, token=int(taken["token"]))
        current = self._refused(name, refusal)
        status = AcquireStatus(current["_refusal"] or "busy") if current else AcquireStatus.ALREADY_RAN
        if status in (AcquireStatus.PAUSED, AcquireStatus.STALE_SCHEDULE):  # unrun if no one took it over
            unrun = {"$and": [{"$in": [refusal, [AcquireStatus.PAUSED.value, AcquireStatus.STALE_SCHEDULE.value]]},
                              {"$eq": ["$token", tick_token]}]}
            self._call(self.collection.update_one, {"_id": name, "$expr": unrun}, _UNLOCK)
        if status is AcquireStatus.STALE_SCHEDULE:
            assert current is not None
            return Acquisition(status, schedule_version=_state(current).schedule_version)
        return Acquisition(status, holder=current.get("locked_by") or None if current else None)

    def _refused(self, name: str, refusal: Document) -> Document | None:
        """``name``'s document with ``_refusal``: what ``refusal`` (a :func:`_first` of reasons) says of it now."""
        why: list[Document] = [{"$match": {"_id": name}}, {"$addFields": {"_refusal": refusal}}]
        return next(iter(self._call(lambda: list(self.collection.aggregate(why)))), None)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        update = [{"$set": {"lock_until": {"$add": ["$$NOW", duration_ms(lease)]}}}]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def claim_next(self, name: str, *, fire_time: datetime, lease: timedelta, replace: bool = False) -> bool:
        fire = ms_to_datetime(datetime_to_ms(fire_time))
        # A live slot refuses another tick; with replace, only a later one.
        other = {"$and": [_SLOT_LIVE, {"$gt" if replace else "$ne": ["$next_fire", fire]}]}
        refused = {"$or": [{"$gte": ["$last_fire_time", fire]}, other]}
        query = {"_id": name, **_VISIBLE, "$expr": {"$eq": [refused, False]}}
        changes: Document = {"next_fire": {"$literal": fire}, "next_until": {"$add": ["$$NOW", duration_ms(lease)]}}
        if replace:
            changes["stop_token"] = {"$cond": [_HELD, "$token", "$stop_token"]}
        return self._call(self.collection.find_one_and_update, query, [{"$set": changes}]) is not None

    def renew_watching(self, name: str, *, token: int, lease: timedelta) -> Renewal:
        update = [{"$set": {"lock_until": {"$add": ["$$NOW", duration_ms(lease)]}}}]
        renewed = self._call(self.collection.find_one_and_update, {"_id": name, "locked": True, "token": token}, update)
        if renewed is None:
            return Renewal.LOST
        return Renewal.STOP if renewed.get("stop_token") == token else Renewal.RENEWED

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0),
                outcome: str | None = None, error: str | None = None) -> bool:
        error = check_outcome(outcome, error)
        update: Document | list[Document] = _UNLOCK
        if hold_at_least or outcome is not None:  # a pipeline: one $$NOW for every time it writes
            hold_until = {"$add": ["$last_locked_at", duration_ms(hold_at_least)]}
            still_held = {"$gt": [hold_until, "$$NOW"]}
            changes: Document = {
                "locked": still_held,
                "lock_until": {"$cond": [still_held, hold_until, "$$NOW"]},
                "last_released_at": "$$NOW",
                "tick_token": {"$literal": 0},
            }
            if outcome is not None:
                changes |= {"last_outcome": {"$literal": outcome}, "last_finished_at": "$$NOW",
                            "last_error": {"$literal": error}}
                if outcome == "succeeded":
                    changes |= {"last_success_at": "$$NOW", "failures": 0}
            update = [{"$set": changes}]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def force_unlock(self, name: str) -> bool:
        result = self._call(self.collection.update_one, {"_id": name, "locked": True}, _UNLOCK)
        return result.matched_count == 1

    def delete(self, name: str) -> bool:
        update = {"$set": {"deleted": True}}
        return self._call(self.collection.update_one, {"_id": name, **_VISIBLE}, update).matched_count == 1

    def _control(self, query: Document, update: Document | list[Document]) -> LockState | None:
        """Apply an update ($currentDate or $$NOW: the server's clock) to one document; its new state, if any."""
        document = self._call(self.collection.find_one_and_update, query, update, return_document=ReturnDocument.AFTER)
        return None if document is None else _state(document)

    def pause(self, name: str, *, until: datetime | None = None, by: str | None = None,
              note: str | None = None) -> LockState | None:
        until = None if until is None else ms_to_datetime(datetime_to_ms(until))  # as precise as the store
        changes = {"paused": True, "paused_until": until, "paused_by": by, "pause_note": check_pause_note(note)}
        return self._control({"_id": name, **_VISIBLE}, {"$set": changes, "$currentDate": {"paused_at": True}})

    def record_failure(self, name: str, *, pause_after: int | None = None, by: str | None = None,
                       note: str | None = None) -> tuple[int, bool]:
        note = check_pause_note(note)
        counted = self._control({"_id": name, **_VISIBLE}, {"$inc": {"failures": 1}})
        if counted is None:
            return 0, False
        if pause_after is None or counted.failures < pause_after:
            return counted.failures, False
        # A second atomic step: only the call that finds the job not paused (on the server's clock) pauses it.
        not_paused = {"$or": [{"paused": {"$ne": True}}, {"paused_until": {"$ne": None, "$lte": self.now()}}]}
        changes = {"paused": True, "paused_until": None, "paused_by": by, "pause_note": note}
        paused = self._control({"_id": name, **_VISIBLE, **not_paused},
                               {"$set": changes, "$currentDate": {"paused_at": True}})
        return counted.failures, paused is not None

    def resume(self, name: str) -> LockState | None:
        # A pause whose until has passed ended then, not now: the ticks after it are missed, not paused.
        ended = {"$cond": [{"$or": [_NO_UNTIL, {"$gt": ["$paused_until", "$$NOW"]}]}, "$$NOW", "$paused_until"]}
        update = [{"$set": {"resumed_at": ended, "paused": False, "paused_at": None, "paused_until": None,
                            "paused_by": None, "pause_note": None}}]
        resumed = self._control({"_id": name, "paused": True, **_VISIBLE}, update)
        return resumed if resumed is not None else self.lock(name)  # not paused: nothing to change

    def set_schedule(self, name: str, spec: str | None, *, timezone: str | None = None,
                     by: str | None = None) -> LockState | None:
        update = {
            "$set": {"schedule": spec, "schedule_timezone": timezone, "schedule_by": by},
            "$inc": {"schedule_version": 1},
            "$currentDate": {"schedule_changed_at": True},
        }
        return self._control({"_id": name, **_VISIBLE}, update)

    def define(self, name: str, definition: str | None, *, by: str | None = None) -> LockState | None:
        schedule = {"schedule_version": {"$add": [{"$ifNull": ["$schedule_version", 0]}, 1]},
                    "schedule_by": {"$literal": by}, "schedule_changed_at": "$$NOW"}
        if definition is None:  # hidden as delete() hides it, token and last fire time kept
            update = [{"$set": {"definition": None, "deleted": {"$literal": True}, **schedule}}]
            return self._control({"_id": name, **_VISIBLE}, update)
        defined = {"definition": {"$literal": check_definition(definition)}, "deleted": {"$literal": False},
                   "schedule": None, "schedule_timezone": None, **schedule}
        update = [*_insert_only(name), {"$set": defined}]  # created if missing, revived if deleted

        def upsert() -> Document | None:
            return self.collection.find_one_and_update({"_id": name}, update, upsert=True,
                                                       return_document=ReturnDocument.AFTER)

        def run() -> Document | None:
            try:
                return upsert()
            except DuplicateKeyError:  # two upserts of one new _id at once: the other one inserted it, update it
                return upsert()

        document = self._call(run)
        assert document is not None  # an upsert returning the document after it always has one
        return _state(document)

    def open_incident(self, name: str, incident: str, *, replacing: str | None = None) -> bool:
        check_incident(incident)
        current = {"$in": [None, ""]} if replacing is None else check_incident(replacing)  # None: null or missing
        query = {"_id": name, "incident": current, **_VISIBLE}
        update = {"$set": {"incident": incident}, "$currentDate": {"incident_at": True}}
        return self._call(self.collection.update_one, query, update).matched_count == 1

    def close_incident(self, name: str, incident: str) -> bool:
        check_incident(incident)
        update = {"$set": {"incident": None, "incident_at": None}}
        query = {"_id": name, "incident": incident, **_VISIBLE}
        return self._call(self.collection.update_one, query, update).matched_count == 1

    def lock(self, name: str) -> LockState | None:
        document = self._call(self.collection.find_one, {"_id": name, **_VISIBLE})
        return None if document is None else _state(document)

    def locks(self) -> list[LockState]:
        documents = self._call(lambda: list(self.collection.find(_VISIBLE)))
        return sorted((_state(document) for document in documents), key=lambda state: state.name)

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


# A plain update, not a pipeline: $currentDate is the server's clock too, and it is cheaper to apply.
_UNLOCK: Document = {"$set": {"locked": False, "tick_token": 0},
                     "$currentDate": {"lock_until": True, "last_released_at": True}}


def _first(reasons: list[tuple[AcquireStatus, Document]]) -> Document:
    """The first reason that holds, or null: an atomic update's condition, and afterwards what refused it."""
    return {"$switch": {"branches": [{"case": case, "then": status.value} for status, case in reasons],
                        "default": None}}


def _stale(schedule_version: int) -> Document:
    """The document's schedule version is not ``schedule_version`` (one from before overrides is at 0)."""
    return {"$ne": [{"$ifNull": ["$schedule_version", 0]}, schedule_version]}


def _insert_only(name: str) -> list[Document]:
    """An upsert pipeline that makes a new document (created_at = the server's now) and leaves one that exists
    as it is (every document has a token; an upsert starts from just the ``_id``)."""
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


# The document's fields are LockState's, by name ("name" is the _id).
_FIELDS = [field.name for field in fields(LockState) if field.name != "name"]
_NEVER_LOCKED = LockState("", False, None, None, None, None, None, 0)


def _state(document: Mapping[str, Any]) -> LockState:
    """Null, empty or missing fields (a document from before the field existed) keep LockState's defaults;
    datetimes become aware UTC."""
    values: dict[str, Any] = {
        field: _aware(value) if isinstance(value, datetime) else value
        for field in _FIELDS
        if (value := document.get(field)) is not None and value != ""
    }
    return replace(_NEVER_LOCKED, name=document["_id"], **values)

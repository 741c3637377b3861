"""Locks in MongoDB: one document per job, each operation a single atomic update (one round trip).

A deleted lock keeps its document with ``deleted: true`` (a tombstone hidden from readers), so its token,
last fire time and lease survive; seeding or acquiring revives it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, ParamSpec, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit

import pymongo
from bson.codec_options import CodecOptions
from pymongo import ReturnDocument, UpdateOne
from pymongo.collection import Collection
from pymongo.errors import BulkWriteError, ConfigurationError, InvalidName, OperationFailure, PyMongoError
from pymongo.write_concern import WriteConcern

from ..errors import StoreConfigError, StoreUnavailable
from ..urls import check_host_and_port, mask_url, pop_query_options, scrub
from .base import AcquireStatus, Acquisition, LockState, LockStore, datetime_to_ms, duration_ms, ms_to_datetime

__all__ = ["MongoLockStore"]

DEFAULT_DATABASE = "mutexcron"
DEFAULT_COLLECTION = "mutexcron_locks"

# Used only when the URL does not set them (keyword arguments would override the URL's own options).
_DEFAULT_URL_OPTIONS = {"serverSelectionTimeoutMS": 3000, "connectTimeoutMS": 2000, "socketTimeoutMS": 5000}

_DUPLICATE_KEY = 11000

# Every update is an aggregation pipeline reading "$$NOW" so that leases run on the MongoDB server's
# clock, not on the clocks of the instances (which may disagree by seconds). "$$NOW" is one value for
# the whole operation, so the filter and the update agree on it.
_LEASE_RAN_OUT = {"$expr": {"$lte": ["$lock_until", "$$NOW"]}}
_FREE = {"$or": [{"locked": False}, _LEASE_RAN_OUT]}
_VISIBLE = {"deleted": {"$ne": True}}  # documents written before tombstones existed have no "deleted"

P = ParamSpec("P")
T = TypeVar("T")

Document = dict[str, Any]


class MongoLockStore(LockStore):
    """Lock documents in one collection, ``_id`` = job name. Writes use write concern ``majority`` so a
    lock survives a primary failover; datetimes are read back as aware UTC whatever the client's options."""

    def __init__(self, collection: Collection[Document], *, url: str | None = None) -> None:
        codec_options: CodecOptions[Document] = collection.codec_options.with_options(tz_aware=True, tzinfo=UTC)
        self.collection: Collection[Document] = collection.with_options(
            codec_options=codec_options, write_concern=WriteConcern("majority")
        )
        self._display = mask_url(url) if url else f"{collection.database.name}.{collection.name}"
        self._owns_client = False

    @classmethod
    def from_url(cls, url: str, **client_options: Any) -> MongoLockStore:
        """``mongodb://[user:pass@]host[:port][/database][?collection=…&<pymongo options>]``; also ``mongodb+srv://``."""
        cleaned, options = pop_query_options(url, ("collection",))
        parts = urlsplit(cleaned)
        if "," not in parts.netloc:  # a replica-set seed list has several ports; pymongo checks those
            check_host_and_port(cleaned)
        database_name = unquote(parts.path[1:])
        if "." in database_name:  # pymongo would silently read "db.coll" as database "db"
            raise StoreConfigError(
                f"malformed MongoDB URL {mask_url(url)!r}: database name {database_name!r} must not contain '.'; "
                "name the collection with ?collection=…"
            )
        url_options = {key.lower() for key, _ in parse_qsl(parts.query, keep_blank_values=True)}
        for key, value in _DEFAULT_URL_OPTIONS.items():
            if key.lower() not in url_options:
                client_options.setdefault(key, value)
        client_options.setdefault("tz_aware", True)
        client_options.setdefault("tzinfo", UTC)
        try:
            client: pymongo.MongoClient[Document] = pymongo.MongoClient(cleaned, **client_options)
        except (ConfigurationError, ValueError, TypeError) as error:  # InvalidURI is a ConfigurationError
            raise StoreConfigError(f"malformed MongoDB URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
        try:
            database = client.get_default_database(default=DEFAULT_DATABASE)
            collection = database[options.get("collection", DEFAULT_COLLECTION)]
        except (InvalidName, ConfigurationError) as error:
            client.close()
            raise StoreConfigError(f"malformed MongoDB URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
        store = cls(collection, url=url)
        store._owns_client = True
        return store

    def _call(self, operation: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return operation(*args, **kwargs)
        except PyMongoError as error:
            raise StoreUnavailable(f"MongoDB store {self._display}: {error}") from error

    def seed(self, names: Iterable[str]) -> int:
        requests = []
        for name in dict.fromkeys(names):  # revive a tombstone, or create a missing document
            requests.append(UpdateOne({"_id": name, "deleted": True}, {"$set": {"deleted": False}}))
            requests.append(UpdateOne({"_id": name}, {"$setOnInsert": _fresh(name)}, upsert=True))
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

    def acquire(self, name: str, *, owner: str, lease: timedelta, fire_time: datetime | None) -> Acquisition:
        # Stored at millisecond precision, rounded like the Redis store, so the server's comparison and
        # ours below agree on what "the same fire time" is.
        fire = None if fire_time is None else ms_to_datetime(datetime_to_ms(fire_time))
        query: Document = {"_id": name, **_FREE}
        changes: Document = {
            "locked": {"$literal": True},
            "locked_by": {"$literal": owner},  # $literal: an owner starting with "$" is not a field path
            "last_locked_at": "$$NOW",
            "lock_until": {"$add": ["$$NOW", duration_ms(lease)]},
            "token": {"$add": [{"$ifNull": ["$token", 0]}, 1]},
            "deleted": {"$literal": False},
        }
        if fire is not None:
            # {field: None} matches null and missing; $lt never matches null, so both are needed.
            not_yet_fired = {"$or": [{"last_fire_time": None}, {"last_fire_time": {"$lt": fire}}]}
            query = {"_id": name, "$and": [_FREE, not_yet_fired]}
            changes["last_fire_time"] = {"$literal": fire}

        def attempt() -> Document | None:
            return self.collection.find_one_and_update(query, [{"$set": changes}], return_document=ReturnDocument.AFTER)

        taken = self._call(attempt)
        current = None if taken is not None else self._call(self.collection.find_one, {"_id": name})
        if taken is None and (current is None or current.get("deleted")):  # create or revive it, try once more
            self.seed([name])
            taken = self._call(attempt)
            current = None if taken is not None else self._call(self.collection.find_one, {"_id": name})
        if taken is not None:
            return Acquisition(AcquireStatus.ACQUIRED, token=int(taken["token"]))
        if current is None:  # removed by hand between our seed and our retry
            return Acquisition(AcquireStatus.BUSY)
        holder = current.get("locked_by") or None
        last_fire = _optional_datetime(current.get("last_fire_time"))
        if fire is not None and last_fire is not None and last_fire >= fire:
            return Acquisition(AcquireStatus.ALREADY_RAN, holder=holder)
        return Acquisition(AcquireStatus.BUSY, holder=holder)

    def renew(self, name: str, *, token: int, lease: timedelta) -> bool:
        update = [{"$set": {"lock_until": {"$add": ["$$NOW", duration_ms(lease)]}}}]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def release(self, name: str, *, token: int, hold_at_least: timedelta = timedelta(0)) -> bool:
        update: Document | list[Document] = _UNLOCK
        if hold_at_least:
            hold_until = {"$add": ["$last_locked_at", duration_ms(hold_at_least)]}
            still_held = {"$gt": [hold_until, "$$NOW"]}
            update = [
                {
                    "$set": {
                        "locked": still_held,
                        "lock_until": {"$cond": [still_held, hold_until, "$$NOW"]},
                        "last_released_at": "$$NOW",
                    }
                }
            ]
        result = self._call(self.collection.update_one, {"_id": name, "locked": True, "token": token}, update)
        return result.matched_count == 1

    def force_unlock(self, name: str) -> bool:
        result = self._call(self.collection.update_one, {"_id": name, "locked": True}, _UNLOCK)
        return result.matched_count == 1

    def delete(self, name: str) -> bool:
        update = {"$set": {"deleted": True}}
        return self._call(self.collection.update_one, {"_id": name, **_VISIBLE}, update).matched_count == 1

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
_UNLOCK: Document = {"$set": {"locked": False}, "$currentDate": {"lock_until": True, "last_released_at": True}}


def _fresh(name: str) -> Document:
    return {
        "name": name,
        "locked": False,
        "locked_by": None,
        "last_locked_at": None,
        "last_released_at": None,
        "lock_until": None,
        "last_fire_time": None,
        "token": 0,
    }


def _aware(value: datetime) -> datetime:
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _optional_datetime(value: Any) -> datetime | None:
    return _aware(value) if isinstance(value, datetime) else None


def _state(document: Mapping[str, Any]) -> LockState:
    return LockState(
        name=document["_id"],
        locked=bool(document.get("locked")),
        locked_by=document.get("locked_by") or None,
        last_locked_at=_optional_datetime(document.get("last_locked_at")),
        last_released_at=_optional_datetime(document.get("last_released_at")),
        lock_until=_optional_datetime(document.get("lock_until")),
        last_fire_time=_optional_datetime(document.get("last_fire_time")),
        token=int(document.get("token") or 0),
    )

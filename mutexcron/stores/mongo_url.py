"""The MongoDB store's URL: ``mongodb://[user:pass@]host[:port][/database][?collection=…&<pymongo options>]``
(also ``mongodb+srv://``) read into a pymongo collection, every mistake a StoreConfigError naming the URL."""

from __future__ import annotations

from datetime import UTC
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import pymongo
from pymongo.collection import Collection
from pymongo.errors import ConfigurationError, InvalidName

from ..errors import StoreConfigError
from ..urls import check_host_and_port, mask_url, pop_query_options, scrub

__all__ = ["DEFAULT_COLLECTION", "DEFAULT_DATABASE", "collection_from_url"]

DEFAULT_DATABASE = "mutexcron"
DEFAULT_COLLECTION = "mutexcron_locks"

# Used only when the URL does not set them (keyword arguments would override the URL's own options).
_DEFAULT_URL_OPTIONS = {"serverSelectionTimeoutMS": 3000, "connectTimeoutMS": 2000, "socketTimeoutMS": 5000}


def collection_from_url(url: str, **client_options: Any) -> Collection[dict[str, Any]]:
    """The collection ``url`` names, on a new client (tz-aware, UTC) that the caller owns and closes."""
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
        client: pymongo.MongoClient[dict[str, Any]] = pymongo.MongoClient(cleaned, **client_options)
    except (ConfigurationError, ValueError, TypeError) as error:  # InvalidURI is a ConfigurationError
        raise StoreConfigError(f"malformed MongoDB URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
    try:
        database = client.get_default_database(default=DEFAULT_DATABASE)
        return database[options.get("collection", DEFAULT_COLLECTION)]
    except (InvalidName, ConfigurationError) as error:
        client.close()
        raise StoreConfigError(f"malformed MongoDB URL {mask_url(url)!r}: {scrub(str(error), url)}") from None

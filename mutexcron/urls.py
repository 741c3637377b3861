"""URL helpers for store and backend authors: hide passwords by text, and pull mutexcron's own options out of a URL.

Public and documented (README, "Stores"): a backend masks its URL with :func:`mask_url` in errors and logs,
removes its secrets from client libraries' messages with :func:`scrub`, and reads its own query options with
:func:`pop_query_options` (a duration with :func:`seconds_option`). Masking never parses: a password may hold
``#``, ``/``, ``?`` or ``@`` unencoded (generated secrets often do), and a parser would cut it in two and quote
a piece of it in its error message.
"""

from __future__ import annotations

import re
from datetime import timedelta
from urllib.parse import unquote, unquote_plus, urlsplit, urlunsplit

from .errors import StoreConfigError

__all__ = [
    "MASK",
    "check_host_and_port",
    "check_userinfo",
    "mask_url",
    "pop_query_options",
    "scrub",
    "seconds_option",
    "shown",
    "url_scheme",
    "url_secrets",
]

MASK = "***"
# A query option is secret when its name holds one of these (sentinel_password, ssl_password, MongoDB's
# tlsCertificateKeyFilePassword; authMechanismProperties, which may carry AWS_SESSION_TOKEN:…).
_SECRET_WORDS = ("pass", "pwd", "secret", "token", "authmechanismproperties")
_SCHEME = re.compile(r"([A-Za-z][A-Za-z0-9+.-]*)://")
_SECRET_OPTION = re.compile(rf"([?&;][^=&;?#]*(?:{'|'.join(_SECRET_WORDS)})[^=&;?#]*=)[^&]*", re.IGNORECASE)
_URL_CUTS = "/?#"  # where a parser ends the host part; unencoded before the last "@", they split a password
_STRIPPED_BY_PARSERS = str.maketrans("", "", "\t\r\n")  # urlsplit drops these anywhere in a URL


def url_scheme(url: str) -> str | None:
    """The well-formed scheme ``url`` starts with (``redis`` in ``redis://…``), lower-cased; else None."""
    match = _SCHEME.match(url)
    return match.group(1).lower() if match else None


def _userinfo(url: str) -> tuple[int, int] | None:
    """Where the user name and password are, by text: from the scheme's ``://`` (or the start of the
    string, when there is no well-formed scheme) to the last ``@``; None if there is no ``@``."""
    match = _SCHEME.match(url)
    start = match.end() if match else 0
    end = url.rfind("@")
    return (start, end) if end >= start else None


def mask_url(url: str) -> str:
    """``url`` with everything between its scheme and its last ``@`` (the user name and password) and
    any secret query option (``?password=…``) replaced by ``***``, by text, before any parsing."""
    span = _userinfo(url)
    if span is not None:
        url = url[:span[0]] + MASK + url[span[1]:]
    return _SECRET_OPTION.sub(lambda match: match.group(1) + MASK, url)


def shown(value: object) -> str:
    """``value`` as an error message may quote it: a string masked with :func:`mask_url`, then repr'd;
    bytes only by type (they may be a URL with a password)."""
    if isinstance(value, str):
        return repr(mask_url(value))
    if isinstance(value, bytes | bytearray | memoryview):
        return f"a {type(value).__name__} value"
    return repr(value)


def url_secrets(url: str) -> list[str]:
    """The secrets written in ``url`` (user information and secret query options), as written, unquoted,
    and as parsers read them, longest first: :func:`scrub` removes them from client libraries' messages."""
    found: list[str] = []
    span = _userinfo(url)
    if span is not None:
        userinfo = url[span[0]:span[1]]
        found += [userinfo, userinfo.partition(":")[2]]  # a user name alone is no secret: scrub keeps it
    found += [match.group(0).partition("=")[2] for match in _SECRET_OPTION.finditer(url)]
    found += [variant(secret) for secret in found for variant in (unquote, unquote_plus)]
    found += [secret.translate(_STRIPPED_BY_PARSERS) for secret in found]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def scrub(text: str, *urls: str) -> str:
    """``text`` with every secret of ``urls`` replaced by ``***`` (for client libraries' error messages)."""
    for url in urls:
        for secret in url_secrets(url):
            text = text.replace(secret, MASK)
    return text


def check_userinfo(url: str) -> None:
    """Raise StoreConfigError, before any parsing, if a ``/``, ``?`` or ``#`` comes before the last ``@``:
    a parser would end the host there and read a piece of the password as the port, path or query."""
    span = _userinfo(url)
    if span is not None and any(cut in url[span[0]:span[1]] for cut in _URL_CUTS):
        raise StoreConfigError(
            f"malformed store URL {mask_url(url)!r}: '/', '?' or '#' before its last '@'; percent-encode them in "
            "a user name or password (%2F, %3F, %23), and an '@' in a path or query option (%40)"
        )


def pop_query_options(url: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """Remove mutexcron's own ``names`` from the URL's query; return the cleaned URL and their values.

    The other options keep their exact text: re-encoding them would break values a client does not
    unquote (pymongo's ``readPreferenceTags=dc:ny,rack:1``).
    """
    check_userinfo(url)
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise StoreConfigError(f"malformed store URL {mask_url(url)!r}: {scrub(str(error), url)}") from None
    kept: list[str] = []
    options: dict[str, str] = {}
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if unquote_plus(key) in names:
            options[unquote_plus(key)] = unquote_plus(value)
        elif pair:
            kept.append(pair)
    cleaned = urlunsplit(parts._replace(query="&".join(kept)))
    if not parts.netloc and url.startswith(f"{parts.scheme}://"):  # unix:///path: urlunsplit drops the "//"
        cleaned = f"{parts.scheme}://{cleaned[len(parts.scheme) + 1:]}"
    return cleaned, options


def check_host_and_port(url: str) -> None:
    """Raise StoreConfigError for a URL whose port is not a number or out of range."""
    try:
        urlsplit(url).port  # noqa: B018 - accessing .port validates it
    except ValueError as error:
        raise StoreConfigError(f"malformed store URL {mask_url(url)!r}: {scrub(str(error), url)}") from None


def seconds_option(url: str, name: str, value: str, *, what: str = "store") -> timedelta:
    """A URL's ``?<name>=<seconds>`` option as a positive timedelta; anything else (not a number, zero, negative,
    infinite, too long) is a StoreConfigError naming the option and ``what`` URL, masked."""
    try:
        result: timedelta | None = timedelta(seconds=float(value))
    except (ValueError, OverflowError):  # not a number, nan, inf, too large
        result = None
    if result is None or result <= timedelta(0):
        raise StoreConfigError(f"{what} URL {mask_url(url)!r}: {name}={value!r} must be a positive number of seconds")
    return result

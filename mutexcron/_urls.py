"""Store URL helpers: hide passwords and pull mutexcron's own options out of a URL's query."""

from __future__ import annotations

from urllib.parse import parse_qsl, unquote, unquote_plus, urlencode, urlsplit, urlunsplit

from .errors import StoreConfigError

_SECRET_KEYS = {"password", "pass", "pwd", "secret", "token", "authsource_password"}


def mask_url(url: str) -> str:
    """``url`` with any password (in the netloc or the query) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        credentials, _, hosts = netloc.rpartition("@")
        user, has_password, _ = credentials.partition(":")
        netloc = f"{user}:***@{hosts}" if has_password else f"{credentials}@{hosts}"
    query = parts.query
    pairs = parse_qsl(query, keep_blank_values=True)
    if any(key.lower() in _SECRET_KEYS for key, _ in pairs):
        query = urlencode([(k, "***" if k.lower() in _SECRET_KEYS else v) for k, v in pairs], safe="*")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def url_secrets(url: str) -> list[str]:
    """The password(s) written in ``url`` (netloc and secret query options), raw and unquoted, longest first."""
    try:
        parts = urlsplit(url)
        found = [parts.password or ""]
    except ValueError:
        return []
    found += [value for key, value in parse_qsl(parts.query) if key.lower() in _SECRET_KEYS]
    found += [unquote(secret) for secret in found]
    return sorted({secret for secret in found if secret}, key=len, reverse=True)


def scrub(text: str, url: str) -> str:
    """``text`` with every password of ``url`` replaced by ``***`` (for client libraries' error messages)."""
    for secret in url_secrets(url):
        text = text.replace(secret, "***")
    return text


def pop_query_options(url: str, names: tuple[str, ...]) -> tuple[str, dict[str, str]]:
    """Remove mutexcron's own ``names`` from the URL's query; return the cleaned URL and their values.

    The other options keep their exact text: re-encoding them would break values a client does not
    unquote (pymongo's ``readPreferenceTags=dc:ny,rack:1``).
    """
    try:
        parts = urlsplit(url)
    except ValueError as error:
        raise StoreConfigError(f"malformed store URL {mask_url(url)!r}: {error}") from None
    kept: list[str] = []
    options: dict[str, str] = {}
    for pair in parts.query.split("&"):
        key, _, value = pair.partition("=")
        if unquote_plus(key) in names:
            options[unquote_plus(key)] = unquote_plus(value)
        elif pair:
            kept.append(pair)
    return urlunsplit(parts._replace(query="&".join(kept))), options


def check_host_and_port(url: str) -> None:
    """Raise StoreConfigError for a URL whose port is not a number or out of range."""
    try:
        urlsplit(url).port  # noqa: B018 - accessing .port validates it
    except ValueError as error:
        raise StoreConfigError(f"malformed store URL {mask_url(url)!r}: {error}") from None

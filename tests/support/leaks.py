"""Looking for a password everywhere it could leak: exception chains and tracebacks, log records, reprs."""

from __future__ import annotations

import logging
import string
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st

# Random passwords over every printable character; 4 or more so that one cannot turn up by chance.
passwords = st.text(alphabet=string.printable, min_size=4, max_size=20)

# Every scheme a store, task backend or cancel store takes, and the mistypes people make. Closed port 1
# and short timeouts: nothing waits on the network. "{}" is the password.
URL_TEMPLATES = (
    "redis://:{}@127.0.0.1:1/0",
    "redis://user:{}@127.0.0.1:1/0",
    "rediss://:{}@127.0.0.1:1/0",
    "redis+cluster://:{}@127.0.0.1:1,127.0.0.1:2",
    "rediss+cluster://user:{}@127.0.0.1:1?prefix=app:",
    "redis+sentinel://:{}@127.0.0.1:1,127.0.0.1:2/mymaster/0",
    "rediss+sentinel://user:{}@127.0.0.1:1/mymaster",
    "mongodb://user:{}@127.0.0.1:1/db?serverSelectionTimeoutMS=20&connectTimeoutMS=20",
    "mongodb+srv://user:{}@cluster.example.invalid/db",
    "amqp://guest:{}@127.0.0.1:1/",
    "redis:/:{}@127.0.0.1:1/0",
    "redis//:{}@127.0.0.1:1/0",
    "rdis://:{}@127.0.0.1:1/0",
    ":{}@127.0.0.1:1/0",
)

templates = st.sampled_from(URL_TEMPLATES)
_NOISE = set(string.hexdigits + string.whitespace + ".-:+")
_ROOT = Path(__file__).resolve().parents[2]
# The fixed texts of mutexcron's own messages: a password that is a piece of one proves nothing.
_FIXED_TEXT = "\n".join(
    path.read_text() for package in ("mutexcron", "mutexcron_django") for path in (_ROOT / package).rglob("*.py")
)


@dataclass(frozen=True)
class SecretURL:
    url: str
    password: str


def _shown_anyway(template: str, password: str) -> bool:
    """A password that the rest of the URL, mutexcron's own message texts or a client's debug log
    (random hex ids, numbers, times) could contain anyway proves nothing."""
    return any(password in text for text in (template, _FIXED_TEXT)) or set(password) <= _NOISE


# A URL of every kind with a random password in it.
secret_urls = st.tuples(templates, passwords).filter(lambda pair: not _shown_anyway(*pair)).map(
    lambda pair: SecretURL(pair[0].format(pair[1]), pair[1])
)


def exception_texts(error: BaseException) -> list[str]:
    """What an error tracker or a traceback shows of ``error``: every message in its chain, formatted."""
    texts = ["".join(traceback.format_exception(error))]
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        texts += [str(current), repr(current), repr(current.args)]
        current = current.__cause__ or current.__context__
    return texts


def log_texts(caplog: pytest.LogCaptureFixture) -> list[str]:
    """Every captured log record as a handler would write it (message, arguments, traceback)."""
    texts = []
    for record in caplog.records:
        texts += [record.getMessage(), repr(record.args)]
        if record.exc_info and record.exc_info[1] is not None:
            texts += exception_texts(record.exc_info[1])
    return texts


def texts_while(caplog: pytest.LogCaptureFixture, collect: Callable[[], list[str]]) -> list[str]:
    """The texts ``collect`` returns, and every log record (any level) written while it ran."""
    caplog.clear()
    with caplog.at_level(logging.DEBUG):
        texts = collect()
    return texts + log_texts(caplog)


def assert_hidden(password: str, texts: list[str]) -> None:
    """No text shows ``password``."""
    leaks = [text for text in texts if password in text]
    assert not leaks, f"the password {password!r} appears in: {leaks[0][:2000]}"

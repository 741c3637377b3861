"""The task record store contract on the in-memory store (``mutexcron.tasks.records.memory``)."""

from __future__ import annotations

import pytest

from mutexcron.tasks.records.memory import MemoryTaskRecords
from tests.tasks.contract import TaskRecordStoreContract


@pytest.fixture
def marks() -> MemoryTaskRecords:
    return MemoryTaskRecords()


class TestMemoryTaskRecords(TaskRecordStoreContract):
    """Every record store guarantee, in this process's memory."""

"""Task record stores: where a broker's backend (RabbitMQ) keeps each task's status, result and cancellation,
since the broker cannot look a task up. :mod:`.base` holds the :class:`TaskRecordStore` contract and the store
chosen by URL; :mod:`.redis` and :mod:`.memory` are two stores (the SQL one is the Django app's)."""

from .base import Claim, RecordDataError, TaskRecord, TaskRecordStore, Verdict, cancel_store_from_url

__all__ = ["Claim", "RecordDataError", "TaskRecord", "TaskRecordStore", "Verdict", "cancel_store_from_url"]

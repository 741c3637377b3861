"""How ``manage.py mutexcron`` prints: times in a zone, ISO times for JSON, plain-text tables, and a
lock's state in one word (the core's, which ``python -m mutexcron`` prints with too)."""

from mutexcron.ops.listing import iso, lock_state, table, when

__all__ = ["iso", "lock_state", "table", "when"]

"""The Redis task backend (``redis://``, ``redis+cluster://``, ``redis+sentinel://``): :mod:`.backend` the backend,
:mod:`.consumer` its worker loop and deliveries, :mod:`.lua` its scripts, :mod:`.migrate` the move from the first
key layout (``python -m mutexcron.tasks.backends.redis.migrate``)."""

from .backend import RedisTaskBackend

__all__ = ["RedisTaskBackend"]

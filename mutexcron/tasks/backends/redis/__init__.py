"""The Redis task backend (``redis://``, ``redis+cluster://``, ``redis+sentinel://``): :mod:`.backend` the backend,
:mod:`.consumer` its worker loop and deliveries, :mod:`.lua` its scripts."""

from .backend import RedisTaskBackend

__all__ = ["RedisTaskBackend"]

"""gunicorn config for the eager variant: each worker starts its scheduler right after the fork."""

from mutexcron_django.gunicorn import post_worker_init

__all__ = ["post_worker_init"]

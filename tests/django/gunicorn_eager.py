"""gunicorn config that names mutexcron's old ``post_worker_init`` hook: no longer needed (every worker starts its
scheduler when it boots), still accepted, and it starts nothing more (test_autostart_servers.py)."""

from mutexcron_django.gunicorn import post_worker_init

__all__ = ["post_worker_init"]

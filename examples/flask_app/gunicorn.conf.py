"""gunicorn settings of the example: each worker starts its scheduler once it has loaded the app (without the
hook it would start at the worker's first request)."""

from mutexcron.contrib.flask import post_worker_init  # noqa: F401  (a gunicorn server hook)

bind = "127.0.0.1:8000"
workers = 3

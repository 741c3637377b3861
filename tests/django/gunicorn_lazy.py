"""gunicorn config for the lazy variant: no mutexcron hook, so a worker starts its scheduler at its first
request. The hook below only logs when a worker has loaded the app, so the test knows when to look."""

import os


def post_worker_init(worker):  # type: ignore[no-untyped-def]
    worker.log.info("fleet: app loaded in worker pid=%d, no scheduler hook", os.getpid())

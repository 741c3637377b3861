"""A Flask app whose every gunicorn worker runs a scheduler; each second's tick of ``record_tick`` runs in one of
them. Run it (see README.md) and ``curl localhost:8000/ticks``: the pid that ran each tick changes, no tick
appears twice.

Environment: MUTEXCRON_STORE (the lock store), EXAMPLE_REDIS_URL and EXAMPLE_TICKS_KEY (where ticks are noted).
"""

from __future__ import annotations

import json
import os
from typing import Any

import redis
from flask import Flask

from mutexcron import JobContext, mutex_cron
from mutexcron.contrib.flask import MutexCron, blueprint

TICKS_KEY = os.environ.get("EXAMPLE_TICKS_KEY", "mutexcron-example:flask:ticks")
ticks = redis.Redis.from_url(os.environ.get("EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/0"))


@mutex_cron("* * * * * *")  # every second, on every worker; the lock picks one to run each tick
def record_tick(ctx: JobContext) -> None:
    ticks.rpush(TICKS_KEY, json.dumps({"tick": ctx.fire_time.isoformat(), "pid": os.getpid()}))


app = Flask(__name__)
app.config["MUTEXCRON_STORE"] = os.environ.get("MUTEXCRON_STORE", "redis://127.0.0.1:6379/0")
app.config["MUTEXCRON_METRICS"] = True
app.config["MUTEXCRON_HEALTH_TOKEN"] = os.environ.get("EXAMPLE_HEALTH_TOKEN")
mutexcron = MutexCron(app)
app.register_blueprint(blueprint, url_prefix="/mutexcron")


@app.get("/ticks")
def last_ticks() -> list[dict[str, Any]]:
    """The last 20 ticks and the pid of the worker that ran each."""
    return [json.loads(entry) for entry in ticks.lrange(TICKS_KEY, -20, -1)]


@app.get("/pid")
def pid() -> str:
    return str(os.getpid())

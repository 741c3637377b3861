"""A FastAPI app whose every worker process runs a scheduler; each second's tick of ``record_tick`` runs in one
of them. Run it (see README.md) and ``curl localhost:8000/ticks``: the pid that ran each tick changes, no tick
appears twice.

Environment: MUTEXCRON_STORE (the lock store), EXAMPLE_REDIS_URL and EXAMPLE_TICKS_KEY (where ticks are noted).
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import redis
from fastapi import FastAPI

from mutexcron import JobContext, Scheduler, mutex_cron
from mutexcron.contrib.starlette import lifespan, router

STORE = os.environ.get("MUTEXCRON_STORE", "redis://127.0.0.1:6379/0")
TICKS_KEY = os.environ.get("EXAMPLE_TICKS_KEY", "mutexcron-example:fastapi:ticks")
ticks = redis.Redis.from_url(os.environ.get("EXAMPLE_REDIS_URL", "redis://127.0.0.1:6379/0"))


@mutex_cron("* * * * * *")  # every second, on every worker; the lock picks one to run each tick
def record_tick(ctx: JobContext) -> None:
    ticks.rpush(TICKS_KEY, json.dumps({"tick": ctx.fire_time.isoformat(), "pid": os.getpid()}))


@asynccontextmanager
async def app_lifespan(app: FastAPI) -> AsyncIterator[None]:
    """The app's own lifespan (its connections and the like), run inside the scheduler's."""
    yield
    ticks.close()


scheduler = Scheduler(STORE, metrics=True)
app = FastAPI(lifespan=lifespan(scheduler, app_lifespan))
app.mount("/mutexcron", router(scheduler, metrics=True, health_token=os.environ.get("EXAMPLE_HEALTH_TOKEN")))


@app.get("/ticks")
def last_ticks() -> list[dict[str, Any]]:
    """The last 20 ticks and the pid of the worker that ran each."""
    return [json.loads(entry) for entry in ticks.lrange(TICKS_KEY, -20, -1)]


@app.get("/pid")
def pid() -> int:
    return os.getpid()

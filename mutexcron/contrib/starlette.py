"""FastAPI and Starlette: :func:`lifespan` starts a scheduler in each serving process and shuts it down at exit;
:func:`router` serves the ``health/`` and ``metrics/`` endpoints. Needs ``mutexcron[fastapi]`` (or Starlette).

    scheduler = Scheduler("redis://127.0.0.1:6379/0")
    app = FastAPI(lifespan=lifespan(scheduler))  # or lifespan(scheduler, app_lifespan), the app's own
    app.mount("/mutexcron", router(scheduler))
"""

from __future__ import annotations

import logging
import os
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Generic, TypeVar, cast, overload

try:
    import anyio.to_thread
    from starlette.requests import Request
    from starlette.responses import Response
    from starlette.routing import Route, Router
except ImportError as missing:  # pragma: no cover - exercised in a process without Starlette
    raise ImportError(f"mutexcron.contrib.starlette needs Starlette: pip install 'mutexcron[fastapi]' ({missing})") \
        from missing

from ..scheduling.scheduler import Scheduler
from . import endpoints

__all__ = ["SchedulerLifespan", "lifespan", "router"]

logger = logging.getLogger("mutexcron.contrib")

S = TypeVar("S")  # what the app's own lifespan yields: None, or its state (a mapping)
AppLifespan = Callable[[Any], AbstractAsyncContextManager[S]]


class SchedulerLifespan(Generic[S]):
    """A scheduler's life in an ASGI app: called with the app (``lifespan=``) or entered itself (``async with``,
    inside an app's own lifespan). Starts the scheduler unless it already runs in this process; at exit shuts
    down the one it started, waiting (up to the scheduler's ``shutdown_timeout``) for running bodies."""

    def __init__(self, scheduler: Scheduler, app_lifespan: AppLifespan[S] | None = None) -> None:
        self.scheduler = scheduler
        self._app_lifespan = app_lifespan
        self._entered: list[bool] = []  # for each open ``async with``: whether it started the scheduler

    def __call__(self, app: Any) -> AbstractAsyncContextManager[S]:
        return self._serving(app)

    @asynccontextmanager
    async def _serving(self, app: Any) -> AsyncIterator[S]:
        started = await self._start()
        try:
            if self._app_lifespan is None:
                yield cast(S, None)
            else:
                async with self._app_lifespan(app) as state:
                    yield state
        finally:
            if started:
                await self._stop()

    async def __aenter__(self) -> Scheduler:
        self._entered.append(await self._start())
        return self.scheduler

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        traceback: TracebackType | None) -> None:
        if self._entered.pop():
            await self._stop()

    async def _start(self) -> bool:
        """Start the scheduler (in a worker thread: it seeds the store) unless it runs; whether it started it."""
        if self.scheduler.running:
            return False
        await anyio.to_thread.run_sync(self.scheduler.start)
        logger.info("mutexcron scheduler started in process %d", os.getpid())
        return True

    async def _stop(self) -> None:
        await anyio.to_thread.run_sync(self.scheduler.shutdown)


@overload
def lifespan(scheduler: Scheduler) -> SchedulerLifespan[None]: ...


@overload
def lifespan(scheduler: Scheduler, app_lifespan: AppLifespan[S]) -> SchedulerLifespan[S]: ...


def lifespan(scheduler: Scheduler, app_lifespan: AppLifespan[Any] | None = None) -> SchedulerLifespan[Any]:
    """The ``lifespan=`` of a FastAPI or Starlette app that runs ``scheduler`` in each serving process; with
    ``app_lifespan`` (the app's own), that one runs inside it and its state is the app's."""
    return SchedulerLifespan(scheduler, app_lifespan)


def router(scheduler: Scheduler, *, metrics: bool = False, health_token: str | None = None) -> Router:
    """``health/`` and ``metrics/`` for ``app.mount("/mutexcron", router(scheduler))``: health from
    ``scheduler``'s store, with job names and errors only for ``Authorization: Bearer <health_token>``;
    metrics only with ``metrics=True`` (404 otherwise), as ``Scheduler(metrics=True)`` records them."""

    def health(request: Request) -> Response:  # a plain function: Starlette runs it in its thread pool
        detail = endpoints.may_see_details(request.headers.get("Authorization"), health_token)
        return _response(endpoints.health(scheduler, detail=detail))

    def metrics_page(request: Request) -> Response:
        return _response(endpoints.metrics(metrics, request.headers.get("Accept", ""),
                                           how_to_enable="pass metrics=True to mutexcron.contrib.starlette.router"))

    return Router(routes=[Route("/health/", health, methods=["GET", "HEAD"], name="mutexcron-health"),
                          Route("/metrics/", metrics_page, methods=["GET"], name="mutexcron-metrics")])


def _response(answer: endpoints.Answer) -> Response:
    return Response(answer.body, status_code=answer.status, media_type=answer.content_type,
                    headers={"Cache-Control": "no-store"})

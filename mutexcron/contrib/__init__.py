"""Web framework integrations: :mod:`mutexcron.contrib.starlette` (FastAPI and Starlette) and
:mod:`mutexcron.contrib.flask`. Importing this package imports no framework; each module needs its extra
(``mutexcron[fastapi]``, ``mutexcron[flask]``). See docs/fastapi-flask.md."""

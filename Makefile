# The two commands of the README, `make demo` and `make test`, and what they need. Every environment is built by
# uv from uv.lock (`make lock` refreshes it), so a fresh machine runs what CI ran; `make test-latest` is the one
# that does not: it takes the newest releases pyproject.toml allows, to catch a breaking release before users do.
PYTHON ?= python3
VENV ?= .venv
# mongoeco (the MongoDB wire server the tests use in place of mongod) needs Python 3.13.
PY313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) $(shell command -v python3.13))
PYTEST_ARGS ?=
DEMO_ARGS ?=
# uv itself, pinned, in a virtualenv of its own (a machine's own uv, if any, is not used: its version would vary).
UV_VERSION = 0.13.9
UV = .venv-uv/bin/uv
# uv uses the machine's Pythons and never downloads one.
export UV_PYTHON_DOWNLOADS = never
# Every development environment has the same extras: the tests', the docs site's and the release tools'.
EXTRAS = --extra dev --extra docs --extra release
# mypy --strict on mutexcron/ and mutexcron_django/ ([tool.mypy] in pyproject.toml), in every environment make test
# runs in. Each venv keeps its own cache, so the two runs of .ci/run do not share one.
MYPY = $(VENV)/bin/mypy --cache-dir $(VENV)/.mypy_cache
# arq (a benchmark peer) declares redis<6, so it is not in the lock: make bench installs this release without its
# dependencies, and it runs on the locked redis-py.
ARQ = arq==0.28.0

.PHONY: demo test test-latest lint lock dist check-dist docs docs-serve bench soak nemesis services system-deps clean

$(UV):
	$(PYTHON) -m venv .venv-uv
	.venv-uv/bin/pip install -q uv==$(UV_VERSION)

$(VENV)/.installed: pyproject.toml uv.lock | system-deps $(UV)
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --locked $(EXTRAS) --python $(PYTHON)
	touch $@

.venv-mongo/.installed: scripts/mongo-server.lock | $(UV)
	@test -n "$(PY313)" || { echo "Python 3.13 is needed for the MongoDB wire server (pyenv install 3.13)"; exit 1; }
	$(UV) venv -q --allow-existing --python $(PY313) .venv-mongo
	$(UV) pip sync -q --python .venv-mongo/bin/python scripts/mongo-server.lock
	touch $@

services:
	@scripts/services.sh

system-deps:
	@scripts/system-deps.sh

# 3 runserver instances of example_project on one SQLite file; DEMO_SECONDS=12 DEMO_EXIT=1 for CI.
demo: $(VENV)/.installed
	$(VENV)/bin/python example_project/demo.py $(DEMO_ARGS)

# LINT=no skips ruff and mypy (.ci/run checks them once per environment, not in every part of a split suite).
# (make's own default LINT is "lint", the C linter: replaced here unless given on the command line.)
ifeq ($(origin LINT),default)
LINT = yes
endif
define run_suite
	if [ "$(LINT)" = yes ]; then $(VENV)/bin/ruff check . && $(MYPY); fi
	$(VENV)/bin/pytest $(PYTEST_ARGS)
endef

# Without PYTEST_ARGS, the whole suite in three phases as CI splits it (lint, the suite in 4 worker processes, then
# the fleet tests in 4), each announced with its time (scripts/test-phases.sh); with them, lint and one pytest run
# with those arguments (.ci/run's parts, or one file: PYTEST_ARGS=tests/test_cron.py).
test: system-deps $(VENV)/.installed .venv-mongo/.installed services
ifeq ($(strip $(PYTEST_ARGS)),)
	MYPY='$(MYPY)' scripts/test-phases.sh $(VENV) $(LINT)
else
	$(run_suite)
endif

# The nemesis run (docs/nemesis.md): a busy fleet under random faults for MINUTES on STORE (redis, cluster, sentinel,
# postgres, mariadb, mongo), seeded by SEED; BROKEN=release-any|tick-token|ignore-version runs a broken variant.
# Exit 1 if the checker found an anomaly; the run's ledgers, logs and report.md are in .nemesis/.
MINUTES ?= 10
STORE ?= redis
SEED ?= 1
BROKEN ?=
nemesis: system-deps $(VENV)/.installed .venv-mongo/.installed services
	$(VENV)/bin/python -m tests.nemesis --minutes $(MINUTES) --store $(STORE) --seed $(SEED) $(if $(BROKEN),--broken $(BROKEN))

# The newest releases pyproject.toml allows, without the lock, on Python 3.13: a new release of a dependency that
# breaks mutexcron fails here before a user meets it. Rebuilt on every run, since "newest" changes by the day.
test-latest: VENV = .venv-latest
test-latest: system-deps .venv-mongo/.installed services | $(UV)
	rm -rf $(VENV)
	$(UV) venv -q --python $(PY313) $(VENV)
	$(UV) pip install -q --python $(VENV)/bin/python --upgrade -e '.[dev]'
	$(UV) pip freeze --python $(VENV)/bin/python | grep -iE '^(django|redis|pymongo|pika|psycopg|apscheduler)=' || true
	$(run_suite)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(MYPY)

# uv.lock (every extra, both Pythons: Django 6 from Python 3.12 on, Django 5.2 LTS below) and the MongoDB wire
# server's pins, each at the newest releases the ranges allow.
lock: | $(UV)
	$(UV) lock --upgrade
	$(UV) pip compile -q --upgrade --python-version 3.13 --generate-hashes scripts/mongo-server.in -o scripts/mongo-server.lock

# The sdist and the wheel in dist/, checked by twine; check-dist installs the wheel in a new venv, away from the
# checkout, and runs it (scripts/check-dist.sh).
dist: $(VENV)/.installed
	rm -rf dist
	$(UV) build -q --out-dir dist
	$(VENV)/bin/twine check --strict dist/*

check-dist: dist
	scripts/check-dist.sh $(UV) $(PYTHON)

# The docs site (mkdocs.yml): --strict fails on a broken link or a missing API reference.
docs: $(VENV)/.installed
	$(VENV)/bin/mkdocs build --strict --site-dir site

docs-serve: $(VENV)/.installed
	$(VENV)/bin/mkdocs serve

# BENCH_ARGS go to bench/fleet.py (e.g. --no-cluster). The peers come from the bench extra, locked like the rest.
BENCH_ARGS ?=
bench: $(VENV)/.installed .venv-mongo/.installed services
	UV_PROJECT_ENVIRONMENT=$(VENV) $(UV) sync -q --locked --inexact $(EXTRAS) --extra bench --python $(PYTHON)
	$(UV) pip install -q --python $(VENV)/bin/python --no-deps $(ARQ)
	$(VENV)/bin/python bench/lock_overhead.py
	$(VENV)/bin/python bench/tasks.py
	$(VENV)/bin/python bench/fleet.py $(BENCH_ARGS)

# 10 minutes of 8 instances x 20 per-second jobs on Redis and PostgreSQL at once, a random instance SIGKILLed or
# SIGSTOPped every 30 s (bench/soak.py; not in CI, where tests/test_soak.py runs 60 s of it). SOAK_ARGS: --seconds N ...
SOAK_ARGS ?=
soak: $(VENV)/.installed services
	$(VENV)/bin/python bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf .venv .venv313 .venv-latest .venv-mongo .venv-uv .pytest_cache .ruff_cache .hypothesis dist site

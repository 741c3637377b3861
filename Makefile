# The two commands of the README: `make demo` and `make test`. Everything else is what they need.
PYTHON ?= python3
VENV ?= .venv
# mongoeco (the MongoDB wire server the tests use in place of mongod) needs Python 3.13.
PY313 ?= $(firstword $(wildcard $(HOME)/.pyenv/versions/3.13*/bin/python3.13) $(shell command -v python3.13))
PYTEST_ARGS ?=
# mypy --strict on mutexcron/ and mutexcron_django/ ([tool.mypy] in pyproject.toml), in every environment
# make test runs in (.ci/run: Django 6 on Python 3.13 and Django 5.2 on 3.11, each with its own django-stubs).
# Each venv keeps its own cache, so the two runs of .ci/run do not share one.
MYPY = $(VENV)/bin/mypy --cache-dir $(VENV)/.mypy_cache
DEMO_ARGS ?=

.PHONY: demo test lint bench soak services system-deps clean

$(VENV)/.installed: pyproject.toml | system-deps
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	$(VENV)/bin/pip install -q -e '.[dev]'
	touch $@

.venv-mongo/.installed:
	@test -n "$(PY313)" || { echo "Python 3.13 is needed for the MongoDB wire server (pyenv install 3.13)"; exit 1; }
	$(PY313) -m venv .venv-mongo
	.venv-mongo/bin/pip install -q 'mongoeco[wire]>=4.11'
	touch $@

services:
	@scripts/services.sh

system-deps:
	@scripts/system-deps.sh

# 3 runserver instances of example_project on one SQLite file; DEMO_SECONDS=12 DEMO_EXIT=1 for CI.
demo: $(VENV)/.installed
	$(VENV)/bin/python example_project/demo.py $(DEMO_ARGS)

# LINT=no skips ruff and mypy (.ci/run checks them once per environment, not in every part of a split suite).
LINT ?= yes

test: system-deps $(VENV)/.installed .venv-mongo/.installed services
ifeq ($(LINT),yes)
	$(VENV)/bin/ruff check .
	$(MYPY)
endif
	$(VENV)/bin/pytest $(PYTEST_ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(MYPY)

# The peers come from the bench extra (pyproject.toml). arq pins redis-py < 6; it runs fine on ours for the
# benchmark, so it is installed without its deps. BENCH_ARGS go to bench/fleet.py (e.g. --no-cluster).
BENCH_ARGS ?=
bench: $(VENV)/.installed .venv-mongo/.installed services
	$(VENV)/bin/pip install -q -e '.[bench]'
	$(VENV)/bin/pip install -q --no-deps arq
	$(VENV)/bin/python bench/lock_overhead.py
	$(VENV)/bin/python bench/tasks.py
	$(VENV)/bin/python bench/fleet.py $(BENCH_ARGS)

# 10 minutes of 8 instances x 20 per-second jobs on Redis and PostgreSQL at once, a random instance SIGKILLed or
# SIGSTOPped every 30 s (bench/soak.py; not in CI, where tests/test_soak.py runs 60 s of it). SOAK_ARGS: --seconds N ...
SOAK_ARGS ?=
soak: $(VENV)/.installed services
	$(VENV)/bin/python bench/soak.py $(SOAK_ARGS)

clean:
	rm -rf .venv .venv313 .venv-mongo .pytest_cache .ruff_cache .hypothesis

"""``serving_process_kind``: which processes start a scheduler by themselves (unit tests; no server)."""

from __future__ import annotations

import pytest

from mutexcron_django.autostart import serving_process_kind

DJANGO_MAIN = "/venv/lib/python3.11/site-packages/django/__main__.py"  # sys.argv[0] of `python -m django`


def kind(*argv: str, **environ: str) -> str | None:
    return serving_process_kind(list(argv), environ)


@pytest.mark.parametrize("program", ["manage.py", "/srv/app/manage.py", "django-admin", DJANGO_MAIN])
def test_runserver_autoreloader_parent_runs_no_scheduler(program: str) -> None:
    assert kind(program, "runserver") is None


@pytest.mark.parametrize("program", ["manage.py", "/srv/app/manage.py", "django-admin", DJANGO_MAIN])
def test_runserver_autoreloader_child_is_runserver(program: str) -> None:
    assert kind(program, "runserver", "0.0.0.0:8000", RUN_MAIN="true") == "runserver"


def test_runserver_noreload_is_runserver() -> None:
    assert kind("manage.py", "runserver", "--noreload") == "runserver"


@pytest.mark.parametrize("command", ["migrate", "shell", "test", "mutexcron", "check", "collectstatic"])
def test_other_management_commands_run_no_scheduler(command: str) -> None:
    assert kind("manage.py", command, RUN_MAIN="true") is None


def test_manage_py_without_a_command_runs_no_scheduler() -> None:
    assert kind("manage.py") is None


@pytest.mark.parametrize("argv", [
    ["/venv/bin/gunicorn", "project.wsgi", "--workers", "4"],
    ["gunicorn", "project.asgi:application", "-k", "uvicorn.workers.UvicornWorker"],
    ["/venv/bin/uvicorn", "project.asgi:application"],
    ["/venv/bin/daphne", "project.asgi:application"],
    ["/venv/bin/hypercorn", "project.asgi:application"],
    ["/venv/bin/waitress-serve", "project.wsgi:application"],
], ids=lambda argv: argv[0].rsplit("/", 1)[-1])
def test_wsgi_and_asgi_servers_are_servers(argv: list[str]) -> None:
    assert kind(*argv) == "server"


@pytest.mark.parametrize("package", ["gunicorn", "uvicorn"])
def test_python_dash_m_server_is_a_server(package: str) -> None:
    # `python -m gunicorn`: sys.argv[0] is the package's __main__.py
    assert kind(f"/venv/lib/python3.11/site-packages/{package}/__main__.py", "project.wsgi") == "server"


@pytest.mark.parametrize("argv", [
    ["/venv/bin/pytest", "tests"],
    ["/venv/lib/python3.11/site-packages/pytest/__main__.py", "tests"],  # python -m pytest
    ["/venv/bin/pytest", "-k", "runserver"],
])
def test_pytest_runs_no_scheduler(argv: list[str]) -> None:
    assert kind(*argv) is None


@pytest.mark.parametrize("argv", [["/venv/bin/celery", "-A", "project", "worker"], ["script.py"], []])
def test_other_programs_run_no_scheduler(argv: list[str]) -> None:
    assert kind(*argv) is None

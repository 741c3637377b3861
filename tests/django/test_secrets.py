"""Passwords in the ``MUTEXCRON`` settings never leak: not from the settings' checks, the system checks,
building the store or the task queue, or ``manage.py mutexcron list --json``."""

from __future__ import annotations

from io import StringIO

from django.core.checks import run_checks
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings
from hypothesis import HealthCheck, given, settings
from pytest import LogCaptureFixture

from mutexcron.errors import MutexcronError
from mutexcron_django.conf import get_settings
from tests.support.leaks import SecretURL, assert_hidden, exception_texts, secret_urls, texts_while

FUZZ = settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
FAILURES = (ImproperlyConfigured, MutexcronError, CommandError)


def texts_of_settings(mutexcron: dict[str, object]) -> list[str]:
    """Every text the settings' own checks, building the store and the queue, and the deploy system checks
    show for ``mutexcron``."""
    texts: list[str] = []
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": "memory://", **mutexcron}):
        try:
            conf = get_settings()
            texts += [repr(conf), conf.tasks.describe()]
            conf.build_store().close()
            conf.tasks.build_queue().close()
        except FAILURES as error:
            texts += exception_texts(error)
        try:
            texts += [f"{message!r} {message}" for message in run_checks(tags=["mutexcron"],
                                                                          include_deployment_checks=True)]
        except FAILURES as error:
            texts += exception_texts(error)
    return texts


def texts_of_list_json(store: str) -> list[str]:
    """What ``manage.py mutexcron list --json`` writes, and the error it fails with, for ``store``."""
    out, err = StringIO(), StringIO()
    with override_settings(MUTEXCRON={"AUTOSTART": False, "STORE": store}):
        try:
            call_command("mutexcron", "list", "--json", stdout=out, stderr=err)
        except FAILURES as error:
            return [*exception_texts(error), out.getvalue(), err.getvalue()]
    return [out.getvalue(), err.getvalue()]


@FUZZ
@given(secret=secret_urls)
def test_a_store_url_in_the_settings_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: texts_of_settings({"STORE": url})))


@FUZZ
@given(secret=secret_urls)
def test_task_urls_in_the_settings_never_show_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: [
        *texts_of_settings({"TASKS": {"BACKEND": url}}),
        *texts_of_settings({"TASKS": {"BACKEND": url, "CANCEL_STORE": url}}),
        *texts_of_settings({"TASKS": {"BACKEND": "amqp://guest:guest@127.0.0.1:1/", "CANCEL_STORE": url}}),
    ]))


@FUZZ
@given(secret=secret_urls)
def test_list_json_never_shows_the_password(secret: SecretURL, caplog: LogCaptureFixture) -> None:
    url = secret.url
    assert_hidden(secret.password, texts_while(caplog, lambda: texts_of_list_json(url)))

"""The core package stays framework-free: importing it (and its stores and tasks) never imports Django,
and it names no class of the Django app, which plugs its ``django://`` scheme in through the registry."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

CORE = Path(__file__).resolve().parent.parent / "mutexcron"


def python_prints(code: str) -> str:
    """What ``code`` prints in a fresh interpreter (nothing imported yet, nothing registered by hand)."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def test_the_core_does_not_import_django() -> None:
    code = (  # listing the store schemes reads the entry points (mutexcron_django's too) and imports none
        "import sys, mutexcron, mutexcron.stores, mutexcron.stores.redis, mutexcron.stores.mongo, "
        "mutexcron.tasks, mutexcron.tasks.backends.redis, mutexcron.tasks.backends.rabbitmq, mutexcron.testing; "
        "list(mutexcron.stores.SCHEMES); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'mutexcron_django')))"
    )
    assert python_prints(code) == "[]"


def test_the_package_ships_its_type_marker() -> None:
    import importlib.resources

    assert importlib.resources.files("mutexcron").joinpath("py.typed").is_file()


def test_the_core_names_no_django_class_and_imports_no_django_module() -> None:
    offending = [
        f"{path.relative_to(CORE.parent)}:{number}: {line.strip()}"
        for path in sorted(CORE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bDjango[A-Z]\w*|^\s*(from|import)\s+(mutexcron_)?django\b|[\"']mutexcron_django\.", line)
    ]
    assert offending == []


def test_the_django_app_plugs_in_django_urls_through_entry_points() -> None:
    """In a process where the app is installed but never imported, ``django://`` resolves to its classes."""
    code = (
        "import sys; from mutexcron.stores import SCHEMES; from mutexcron.tasks.queue import BACKENDS; "
        "from mutexcron.tasks.records.base import SCHEMES as RECORDS; "
        "print(SCHEMES['django'], BACKENDS['django'], RECORDS['django'], 'mutexcron_django' in sys.modules)"
    )
    printed = python_prints(code)
    from mutexcron_django.apps import BACKENDS

    expected = [BACKENDS["lock_store"], BACKENDS["task_backend"], BACKENDS["record_store"], "False"]
    assert printed.split() == expected


def test_the_public_names_stay_where_they_are() -> None:
    """Users' names in mutexcron.tasks, backend authors' in mutexcron.tasks.backends and mutexcron.backends, the
    URL helpers and the registry in their modules: a change to these lists is a change to the public API."""
    import mutexcron.tasks
    import mutexcron.tasks.backends
    from mutexcron import backends, plugins, urls
    from mutexcron.tasks.records import base as cancel_marks

    assert sorted(mutexcron.tasks.__all__) == [
        "Delivery", "DuplicateTaskHandler", "Handler", "HandlerRegistry", "InvalidTaskType", "NewTask", "PayloadError",
        "TaskBackend", "TaskError", "TaskHandlerError", "TaskInfo", "TaskQueue", "TaskStatus", "UnknownTaskType",
        "backend_from_url", "default_handlers", "task_handler",
    ]
    assert sorted(mutexcron.tasks.backends.__all__) == [
        "Claim", "ClaimHeartbeat", "ClaimedDelivery", "ClaimingBackend", "ClaimingConsumer", "ConsumeRequest",
        "Delivery", "NewTask", "RunningConsumers",
        "TaskBackend", "TaskInfo", "TaskRecord", "TaskRecordStore", "TaskStatus", "Verdict", "cancel_marks_from_url",
        "consumed_types", "run_batch", "warn_stale_settle",
    ]
    assert sorted(urls.__all__) == [
        "MASK", "check_host_and_port", "check_userinfo", "mask_url", "pop_query_options", "scrub", "seconds_option",
        "shown", "url_scheme", "url_secrets",
    ]
    assert sorted(backends.__all__) == [
        "MAX_ERROR_CHARS", "SignalFlag", "as_utc", "clip_error", "duration_ms", "epoch_ms", "ms_to_datetime",
        "positive_duration", "store_errors", "unavailable",
    ]
    assert {"ENTRY_POINT_GROUP", "KINDS", "register", "schemes"} <= set(plugins.__all__)
    for module in (mutexcron.tasks, mutexcron.tasks.backends, urls, plugins, backends):
        assert [name for name in module.__all__ if not hasattr(module, name)] == []
    assert mutexcron.tasks.backends.TaskRecordStore is cancel_marks.TaskRecordStore
    assert mutexcron.tasks.Delivery is mutexcron.tasks.backends.Delivery

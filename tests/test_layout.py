"""The core package stays framework-free: importing it (and its stores and tasks) never imports Django."""

from __future__ import annotations

import subprocess
import sys


def test_the_core_does_not_import_django() -> None:
    code = (
        "import sys, mutexcron, mutexcron.stores, mutexcron.stores.redis, mutexcron.stores.mongo, "
        "mutexcron.tasks, mutexcron.tasks.backends.redis, mutexcron.testing; "
        "print(sorted(m for m in sys.modules if m == 'django' or m.startswith('django.')))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_the_package_ships_its_type_marker() -> None:
    import importlib.resources

    assert importlib.resources.files("mutexcron").joinpath("py.typed").is_file()

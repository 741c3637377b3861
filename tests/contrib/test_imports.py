"""``mutexcron.contrib`` imports no web framework; without one installed, its framework-free modules still import
and a framework's module says which extra to install. The core never imports a framework."""

from __future__ import annotations

import subprocess
import sys

FRAMEWORKS = ("fastapi", "starlette", "flask", "werkzeug", "anyio")
# A finder that makes the frameworks uninstalled in a fresh interpreter.
BLOCK = (
    "import sys, importlib.abc\n"
    "class Gone(importlib.abc.MetaPathFinder):\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    f"        if name.split('.')[0] in {FRAMEWORKS!r}: raise ImportError(f'No module named {{name!r}}')\n"
    "sys.meta_path.insert(0, Gone())\n"
)


def python(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", BLOCK + code], capture_output=True, text=True)


def test_the_framework_free_modules_import_without_any_framework() -> None:
    done = python("import mutexcron, mutexcron.contrib, mutexcron.contrib.config, mutexcron.contrib.endpoints; "
                  "print('ok')")
    assert done.stdout.strip() == "ok", done.stderr


def test_a_framework_module_names_the_extra_to_install() -> None:
    for module, extra in (("starlette", "fastapi"), ("flask", "flask")):
        done = python(f"import mutexcron.contrib.{module}")
        assert f"pip install 'mutexcron[{extra}]'" in done.stderr, done.stderr


def test_the_core_and_contrib_import_no_framework() -> None:
    code = ("import sys, mutexcron, mutexcron.contrib.config, mutexcron.contrib.endpoints, mutexcron.stores; "
            f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FRAMEWORKS[:4]!r}))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"

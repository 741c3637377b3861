#!/usr/bin/env bash
# check-dist.sh UV PYTHON: the wheel in dist/ holds what it must and nothing else, and installs and runs in a new
# virtualenv away from the checkout (so nothing is imported from the source tree).
set -euo pipefail
uv=$(realpath "$1")
python=${2:-python3}
wheel=$(ls dist/*.whl)
sdist=$(ls dist/*.tar.gz)
echo "check-dist: $wheel, $sdist"

# What the wheel carries: the packages with py.typed, the Django templates, static files and migrations; no tests
# or benchmarks.
"$python" - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
def has(prefix: str, suffix: str = "") -> bool:
    return any(n.startswith(prefix) and n.endswith(suffix) for n in names)
wanted = {
    "mutexcron/py.typed": has("mutexcron/py.typed"),
    "mutexcron/stores/": has("mutexcron/stores/", ".py"),
    "mutexcron/tasks/backends/": has("mutexcron/tasks/backends/", ".py"),
    "mutexcron_django/templates/": has("mutexcron_django/templates/", ".html"),
    "mutexcron_django/migrations/0001": has("mutexcron_django/migrations/0001", ".py"),
    "mutexcron_django/management/commands/": has("mutexcron_django/management/commands/", ".py"),
}
static = [n for n in names if n.startswith("mutexcron_django/static/")]
unwanted = [n for n in names if n.split("/")[0] in {"tests", "bench", "example_project", "examples", "docs", "scripts", "typings"}]
missing = [what for what, found in wanted.items() if not found]
print(f"check-dist: {len(names)} files in the wheel, {len(static)} static")
if missing or unwanted:
    sys.exit(f"check-dist: the wheel lacks {missing} / carries {unwanted[:10]}")
PY

# Installed from the wheel alone, run from an empty directory.
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$uv" venv -q --python "$python" "$work/venv"
"$uv" pip install -q --python "$work/venv/bin/python" "$(realpath "$wheel")[django]"
cd "$work"
venv_python="$work/venv/bin/python"
"$venv_python" - <<'PY'
import importlib.metadata, pathlib
import django
from django.conf import settings
settings.configure(INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "django.contrib.admin",
                                   "mutexcron_django"],
                   DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}})
django.setup()
import mutexcron, mutexcron_django
from mutexcron_django import models
for module in (mutexcron, mutexcron_django):
    where = pathlib.Path(module.__file__).resolve()
    assert "site-packages" in where.parts, f"{module.__name__} imported from {where}, not the installed wheel"
assert mutexcron.__version__ == importlib.metadata.version("mutexcron"), "two version numbers"
print(f"check-dist: mutexcron {mutexcron.__version__} and mutexcron_django import from the wheel (Django {django.get_version()})")
PY
"$venv_python" -m mutexcron --help >/dev/null
echo "check-dist: python -m mutexcron --help runs"

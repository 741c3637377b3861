"""docs/django.md's settings table, which says it lists every key, names each key of ``MUTEXCRON`` and of
``MUTEXCRON["TASKS"]`` that mutexcron_django.conf reads (issue 33: METRICS, TRACING and TASKS were missing)."""

from __future__ import annotations

import re
from pathlib import Path

from mutexcron_django.conf import DEFAULTS, TASKS_DEFAULTS

DJANGO_DOC = Path(__file__).resolve().parents[2] / "docs" / "django.md"


def test_the_settings_table_names_every_key_the_app_reads() -> None:
    rows = set(re.findall(r'^\| `([A-Z_]+(?:\["[A-Z_]+"\])?)` \|', DJANGO_DOC.read_text(), re.MULTILINE))

    expected = set(DEFAULTS) | {f'TASKS["{key}"]' for key in TASKS_DEFAULTS}
    assert sorted(expected - rows) == []

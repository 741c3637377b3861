#!/usr/bin/env python
"""manage.py of the fleet test site (tests.django.fleet_settings), run by the multi-process Django tests."""

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # the repository root: tests.django.*
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.django.fleet_settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)

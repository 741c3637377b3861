"""``python -m tests.nemesis``: the nemesis run (tests/nemesis/run.py)."""

import sys

from tests.nemesis.run import main

sys.exit(main())

"""``python -m mutexcron``: see :mod:`mutexcron.cli`."""

from .cli import main

raise SystemExit(main())

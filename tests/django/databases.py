"""The ``django_db`` mark of tests that use mutexcron_django's tables alone: the SQL store's and task queue's."""

from __future__ import annotations

import pytest

# After a transactional test Django empties the tables of every installed app and re-creates their content types
# and permissions (the post_migrate signal), unless it is told which apps the test uses (``available_apps``): then
# it empties those apps' tables alone and skips the signal, a tenth of the MariaDB store contract's time.
STORE_APPS = ["mutexcron_django"]


def on_database(alias: str) -> pytest.MarkDecorator:
    """A transactional test on database ``alias`` that touches mutexcron_django's tables alone."""
    return pytest.mark.django_db(transaction=True, databases=[alias], available_apps=STORE_APPS)

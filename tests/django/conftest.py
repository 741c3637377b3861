"""Fixtures shared by the Django app's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.django.jobhelpers import Declarations


@pytest.fixture
def declare() -> Iterator[Declarations]:
    """Declare jobs in the default registry for one test; they are removed afterwards."""
    declarations = Declarations()
    yield declarations
    declarations.remove_all()

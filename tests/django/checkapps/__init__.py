"""Apps with bad job declarations, installed only by tests/django/test_checks.py."""

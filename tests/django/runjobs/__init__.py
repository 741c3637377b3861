"""An app whose jobs ``manage.py mutexcron run`` runs in tests/django/test_command.py."""

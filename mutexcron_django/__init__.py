"""mutexcron_django: the Django app for mutexcron (SQL lock store, admin, checks, commands)."""

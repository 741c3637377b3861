"""App configuration (the rest of the app's start-up arrives with the Django issue)."""

from django.apps import AppConfig


class MutexcronConfig(AppConfig):
    name = "mutexcron_django"
    label = "mutexcron"
    verbose_name = "Mutex cron"
    default_auto_field = "django.db.models.BigAutoField"

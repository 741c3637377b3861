from django.apps import AppConfig


class TicksConfig(AppConfig):
    name = "ticks"
    default_auto_field = "django.db.models.BigAutoField"

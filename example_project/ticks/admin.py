from django.contrib import admin

from .models import Tick


@admin.register(Tick)
class TickAdmin(admin.ModelAdmin):
    list_display = ("fire_time", "instance_id", "pid", "token", "ran_at")
    list_filter = ("instance_id",)
    date_hierarchy = "fire_time"

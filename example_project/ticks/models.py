from django.db import models


class Tick(models.Model):
    """One run of the 5-second job's body. No unique constraint: a tick run twice would show as two rows."""

    fire_time = models.DateTimeField(db_index=True, help_text="the tick's nominal time (UTC)")
    instance_id = models.CharField(max_length=255, help_text="the instance whose scheduler won the lock")
    pid = models.IntegerField()
    token = models.BigIntegerField(help_text="the lock's fencing token for this run")
    ran_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("-fire_time",)

    def __str__(self) -> str:
        return f"{self.fire_time:%H:%M:%S} on {self.instance_id}"

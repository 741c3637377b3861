"""Minute 61 does not exist: importing this module raises CronSpecError."""

from mutexcron import mutex_cron


@mutex_cron("61 * * * *", name="checkapps.bad_spec")
def report() -> None:
    pass

"""Two functions, one job name: the second declaration raises DuplicateJobError."""

from mutexcron import mutex_cron


@mutex_cron("@daily", name="checkapps.duplicate")
def cleanup() -> None:
    pass


@mutex_cron("@hourly", name="checkapps.duplicate")
def cleanup_again() -> None:
    pass

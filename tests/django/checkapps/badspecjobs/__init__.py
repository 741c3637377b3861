"""An app whose ``cron`` module declares a job with an invalid cron spec (mutexcron.E001)."""

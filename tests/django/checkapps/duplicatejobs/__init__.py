"""An app whose ``cron`` module declares two functions under one job name (mutexcron.E002)."""

"""An app whose ``cron`` module declares valid jobs around bad ones (mutexcron.E001 and E002)."""

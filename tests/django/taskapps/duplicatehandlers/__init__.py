"""An app whose ``tasks`` module declares two handlers for one task type (mutexcron.E003)."""

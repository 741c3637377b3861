"""An app whose ``tasks`` module declares a handler with an invalid task type (mutexcron.E003)."""

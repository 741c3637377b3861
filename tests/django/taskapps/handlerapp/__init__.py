"""An app whose ``tasks`` module declares task handlers (and whose ``task_handlers`` module declares another)."""

"""Apps whose ``tasks`` modules declare task handlers, for the task tests (discovery, E003, the worker)."""

"""The fleet test site's app when FLEET_RUN_ON_TASKS=1: one every-second job whose body runs on task workers."""

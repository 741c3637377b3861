"""The demo's app: jobs in cron.py, and the table where the 5-second job records who ran each tick."""

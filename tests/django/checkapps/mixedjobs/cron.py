"""Valid jobs before, between and after a 7-field spec (E001) and a second function under a taken name (E002): the
bad declarations are kept for the checks and the log, and every valid job is declared."""

from mutexcron import mutex_cron


@mutex_cron("@daily", name="checkapps.mixed.first")
def first() -> None:
    pass


@mutex_cron("0 0 6 * * * 2030", name="checkapps.mixed.seven_fields")
def seven_fields() -> None:
    pass


@mutex_cron("@hourly", name="checkapps.mixed.between")
def between() -> None:
    pass


@mutex_cron("@weekly", name="checkapps.mixed.first")
def first_again() -> None:
    pass


@mutex_cron("@monthly", name="checkapps.mixed.last")
def last() -> None:
    pass

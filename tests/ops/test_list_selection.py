"""``list --state/--match/--limit/--offset``: the jobs a listing shows, chosen by what their locks and runs say on a
real store (Redis, this test's own key prefix), judged as ``health`` judges them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mutexcron import Registry, mutex_cron
from mutexcron.ops.listing import Listing, listing_json, listing_text, read_listing
from mutexcron.ops.selection import Selection, select
from mutexcron.stores import LockStore
from tests.support import wait_until

LONG = timedelta(minutes=10)


@pytest.fixture
def store(redis_store: LockStore) -> LockStore:
    return redis_store


@pytest.fixture
def registry() -> Registry:
    """Five daily jobs: reports.a, reports.b, reports.c, billing.x and billing.y (a listing shows them by name)."""
    jobs = Registry()
    for name in ("reports.a", "reports.b", "reports.c", "billing.x", "billing.y"):
        mutex_cron("0 6 * * *", name=name, registry=jobs)(lambda: None)
    return jobs


def listed(store: LockStore, registry: Registry, selection: Selection) -> Listing:
    return select(read_listing(store, registry, UTC, datetime.now(UTC)), selection)


def names(listing: Listing) -> list[str]:
    return [line.job.name for line in listing.jobs]


def fail(store: LockStore, name: str) -> None:
    token = store.acquire(name, owner="web-1", lease=LONG, fire_time=None).token
    assert token is not None and store.release(name, token=token, outcome="failed", error="ValueError: boom")


def test_state_failing_chooses_the_jobs_whose_latest_run_failed(store: LockStore, registry: Registry) -> None:
    store.seed(registry.names())
    fail(store, "reports.b")
    token = store.acquire("billing.x", owner="web-1", lease=LONG, fire_time=None).token
    assert token is not None and store.release("billing.x", token=token, outcome="succeeded")

    assert names(listed(store, registry, Selection(frozenset({"failing"})))) == ["reports.b"]


def test_state_paused_chooses_the_paused_jobs(store: LockStore, registry: Registry) -> None:
    store.seed(registry.names())
    store.pause("reports.c", by="ops")
    store.pause("billing.y", until=store.now() - timedelta(seconds=1), by="ops")  # already over

    assert names(listed(store, registry, Selection(frozenset({"paused"})))) == ["reports.c"]


def test_state_running_chooses_the_jobs_whose_lock_is_held(store: LockStore, registry: Registry) -> None:
    store.seed(registry.names())
    assert store.acquire("billing.x", owner="web-2", lease=LONG, fire_time=None).acquired

    chosen = listed(store, registry, Selection(frozenset({"running"})))

    assert names(chosen) == ["billing.x"] and chosen.jobs[0].state is not None
    assert chosen.jobs[0].state.locked_by == "web-2"


def test_state_overdue_chooses_a_job_whose_tick_no_instance_ran(store: LockStore) -> None:
    registry = Registry()
    mutex_cron("* * * * * *", name="probe.every_second", registry=registry, alert_after=timedelta(0))(lambda: None)
    mutex_cron("0 6 * * *", name="probe.daily", registry=registry)(lambda: None)
    store.seed(registry.names())

    wait_until(lambda: names(listed(store, registry, Selection(frozenset({"overdue"})))) == ["probe.every_second"],
               timeout=5, what="the per-second job, never run, to be overdue")


def test_several_states_choose_the_jobs_in_any_of_them(store: LockStore, registry: Registry) -> None:
    store.seed(registry.names())
    fail(store, "reports.a")
    store.pause("billing.y", by="ops")

    assert names(listed(store, registry, Selection(frozenset({"failing", "paused"})))) == ["billing.y", "reports.a"]


def test_match_is_a_case_sensitive_glob_on_the_job_name(store: LockStore, registry: Registry) -> None:
    assert names(listed(store, registry, Selection(match="billing.*"))) == ["billing.x", "billing.y"]
    assert names(listed(store, registry, Selection(match="Billing.*"))) == []
    assert names(listed(store, registry, Selection(match="reports.[ab]"))) == ["reports.a", "reports.b"]


def test_limit_and_offset_give_a_page_and_count_every_chosen_job(store: LockStore, registry: Registry) -> None:
    first = listed(store, registry, Selection(match="reports.*", limit=2))
    second = listed(store, registry, Selection(match="reports.*", limit=2, offset=2))

    assert (names(first), first.chosen) == (["reports.a", "reports.b"], 3)
    assert (names(second), second.chosen) == (["reports.c"], 3)
    assert "2 of the 3 job(s) chosen by --match 'reports.*' --limit 2" in listing_text(
        first, command="python -m mutexcron", no_jobs="none", orphans="orphans")
    assert listing_json(second)["chosen"] == 3


def test_a_state_and_a_match_together_choose_the_jobs_in_both(store: LockStore, registry: Registry) -> None:
    store.seed(registry.names())
    fail(store, "reports.a")
    fail(store, "billing.x")

    assert names(listed(store, registry, Selection(frozenset({"failing"}), match="billing.*"))) == ["billing.x"]


def test_orphan_locks_are_chosen_by_their_name_and_lock(store: LockStore, registry: Registry) -> None:
    store.seed(["reports.old", "billing.old"])
    assert store.acquire("billing.old", owner="web-3", lease=LONG, fire_time=None).acquired

    running = listed(store, registry, Selection(frozenset({"running"})))
    matched = listed(store, registry, Selection(match="reports.*"))

    assert [state.name for state in running.orphans] == ["billing.old"]
    assert [state.name for state in matched.orphans] == ["reports.old"]


def test_no_selection_lists_everything_as_before(store: LockStore, registry: Registry) -> None:
    everything = listed(store, registry, Selection())

    assert len(everything.jobs) == 5 and everything.chosen is None
    assert "chosen" not in listing_json(everything)


def test_a_selection_that_chooses_nothing_says_so(store: LockStore, registry: Registry) -> None:
    text = listing_text(listed(store, registry, Selection(match="nothing.*")), command="python -m mutexcron",
                        no_jobs="No jobs declared.", orphans="orphans")

    assert "No job chosen by --match 'nothing.*'." in text and "No jobs declared." not in text


@pytest.mark.parametrize(("options", "named"), [
    ({"states": frozenset({"broken"})}, "'broken'"),
    ({"limit": 0}, "limit"),
    ({"offset": -1}, "offset"),
])
def test_a_bad_selection_is_a_value_error_naming_what_is_wrong(options: dict[str, object], named: str) -> None:
    with pytest.raises(ValueError, match=named):
        Selection(**options)  # type: ignore[arg-type]

#!/usr/bin/env python
"""What pruning the run history costs on PostgreSQL: ``mutexcron_django.history.prune`` (batches of ids, one
DELETE and one transaction each) against one ``DELETE … WHERE started_at < cutoff`` (the old way).

A benchmark report, not a test. For each round it fills ``mutexcron_jobrun`` with N rows older than the
retention (one row per tick, as the history writes them: tick key, three fires folded in) and N/10 newer ones,
then prunes, and reports rows deleted per second, the number of DELETE statements and the longest one (how
long any statement holds its row locks), the rows of both ways interleaved round by round (medians).

    python bench/history_prune.py [--rows N] [--batch B] [--rounds R] [--postgres URL] [--json]

The database is created for the run and dropped afterwards. The exit status is 0 whatever the figures.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any
from urllib.parse import urlsplit

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def setup(url: str, database: str) -> str:
    import django
    import psycopg
    from django.conf import settings
    from django.core.management import call_command

    with psycopg.connect(url, autocommit=True, connect_timeout=5) as server:
        version = str(server.execute("SHOW server_version").fetchone()[0])  # type: ignore[index]
        server.execute(f'CREATE DATABASE "{database}"')
    parts = urlsplit(url)
    settings.configure(
        SECRET_KEY="mutexcron-bench", USE_TZ=True, TIME_ZONE="UTC", DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
        INSTALLED_APPS=["django.contrib.contenttypes", "django.contrib.auth", "mutexcron_django"],
        DATABASES={"default": {"ENGINE": "django.db.backends.postgresql", "NAME": database,
                               "HOST": parts.hostname or "127.0.0.1", "PORT": str(parts.port or 5432),
                               "USER": parts.username or "postgres", "PASSWORD": parts.password or ""}},
        MUTEXCRON={"AUTOSTART": False},
    )
    django.setup()
    call_command("migrate", verbosity=0, interactive=False)
    return version


def fill(rows: int, now: datetime) -> datetime:
    """``rows`` ticks older than 30 days and ``rows // 10`` newer ones; returns the cutoff."""
    from mutexcron_django.models import JobRun

    def tick_rows(count: int, start: datetime, tag: str) -> None:
        batch = []
        for n in range(count):
            fire = start + timedelta(seconds=n)
            batch.append(JobRun(job_name="bench.tick", fire_time=fire, instance_id="web-1", outcome="succeeded",
                                started_at=fire, finished_at=fire + timedelta(milliseconds=20), token=n,
                                tick_key=f"bench.tick@{tag}{n}", fired_count=3,
                                fired_by="web-2 +0.011s\nweb-3 +0.032s\nweb-1 +0.004s"))
            if len(batch) == 5000:
                JobRun.objects.bulk_create(batch)
                batch = []
        JobRun.objects.bulk_create(batch)

    tick_rows(rows, now - timedelta(days=40), "old")
    tick_rows(rows // 10, now - timedelta(days=1), "new")
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE mutexcron_jobrun")
    return now - timedelta(days=30)


def timed_statements() -> tuple[list[float], Any]:
    """A list that gets the duration of every DELETE on the default connection, and the wrapper to install."""
    durations: list[float] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.lstrip().upper().startswith("DELETE"):
                durations.append(time.perf_counter() - started)

    return durations, wrapper


def one_round(rows: int, batch: int, way: str) -> dict[str, float]:
    from django.db import connection, transaction

    from mutexcron_django import history
    from mutexcron_django.models import JobRun

    JobRun.objects.all().delete()
    cutoff = fill(rows, datetime.now(UTC))
    durations, wrapper = timed_statements()
    with connection.execute_wrapper(wrapper):
        started = time.perf_counter()
        if way == "batched":
            deleted = history.prune(cutoff, batch=batch).deleted
        else:
            with transaction.atomic():
                deleted = JobRun.objects.filter(started_at__lt=cutoff).delete()[0]
        elapsed = time.perf_counter() - started
    assert deleted == rows, (deleted, rows)
    assert JobRun.objects.count() == rows // 10
    return {"seconds": elapsed, "rows_per_second": rows / elapsed, "statements": len(durations),
            "longest_statement_ms": max(durations) * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--postgres", default=DEFAULT_POSTGRES_URL)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    database = f"mutexcron_bench_{uuid.uuid4().hex[:12]}"
    version = setup(args.postgres, database)
    results: dict[str, list[dict[str, float]]] = {"batched": [], "one statement": []}
    try:
        for _ in range(args.rounds):
            for way in results:
                results[way].append(one_round(args.rows, args.batch, way if way == "batched" else "single"))
    finally:
        import psycopg
        from django.db import connections

        connections.close_all()
        with psycopg.connect(args.postgres, autocommit=True, connect_timeout=5) as server:
            server.execute(f'DROP DATABASE IF EXISTS "{database}" WITH (FORCE)')
    summary = {way: {key: statistics.median(r[key] for r in rounds) for key in rounds[0]}
               for way, rounds in results.items()}
    if args.json:
        print(json.dumps({"postgres": version, "rows": args.rows, "batch": args.batch, "median": summary}, indent=2))
        return
    print(f"PostgreSQL {version}: prune {args.rows:,} old rows of {args.rows + args.rows // 10:,} "
          f"(medians of {args.rounds} rounds)")
    for way, figures in summary.items():
        label = f"batched ({args.batch:,} ids per DELETE)" if way == "batched" else "one DELETE"
        print(f"  {label:28} {figures['rows_per_second']:>9,.0f} rows/s  {figures['seconds']:6.2f} s  "
              f"{figures['statements']:4.0f} statement(s), the longest {figures['longest_statement_ms']:8.1f} ms")


if __name__ == "__main__":
    main()

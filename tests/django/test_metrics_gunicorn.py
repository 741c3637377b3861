"""MUTEXCRON["METRICS"] under gunicorn's multiprocess mode: 2 workers, each with its scheduler, write their
metrics to PROMETHEUS_MULTIPROC_DIR, and /mutexcron/metrics/ (answered by either worker) serves the totals
of both. The fleet site's job fires every second on both workers; one of them runs each tick (its body
appends to that worker's ledger) and the other skips it."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tests.django.fleet_support import HERE, JOB, Site, free_port, http_get, sqlite_database
from tests.django.test_autostart_servers import GUNICORN, has_control_socket
from tests.support import wait_until

pytestmark = pytest.mark.fleet



@pytest.fixture
def site(tmp_path: Path) -> Iterator[Site]:
    with sqlite_database(tmp_path) as database, Site(tmp_path, database) as site:
        site.migrate()
        yield site


def scrape(url: str) -> dict[tuple[str, str], float] | None:
    """The job's samples on the metrics page: (sample name, outcome or "") -> value; None if no answer."""
    text = http_get(url, timeout=5)
    if text is None:
        return None
    samples: dict[tuple[str, str], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("job") == JOB and "le" not in sample.labels:
                samples[(sample.name, sample.labels.get("outcome", ""))] = sample.value
    return samples


def test_the_metrics_view_serves_the_totals_of_both_gunicorn_workers(site: Site, tmp_path: Path) -> None:
    if not Path(GUNICORN).exists() and shutil.which("gunicorn") is None:
        pytest.skip("gunicorn is not installed")
    files = tmp_path / "prometheus"
    files.mkdir()
    port = free_port()
    command = [GUNICORN if Path(GUNICORN).exists() else "gunicorn", "tests.django.fleet_wsgi:application",
               "--workers", "2", "--bind", f"127.0.0.1:{port}", "--config", str(HERE / "gunicorn_eager.py"),
               "--graceful-timeout", "10", *(["--no-control-socket"] if has_control_socket() else [])]
    server = site.spawn("gunicorn", command, PROMETHEUS_MULTIPROC_DIR=str(files), FLEET_METRICS="1")

    def both_started() -> set[int]:
        server.assert_alive()
        started = set(server.started_pids())
        return started if len(started) >= 2 else set()

    workers = wait_until(both_started, timeout=30, what="both workers to start a scheduler")

    def both_ran() -> bool:
        server.assert_alive()
        return {body["pid"] for body in site.bodies()} >= workers

    wait_until(both_ran, timeout=40, what=f"each worker {sorted(workers)} to run a tick", interval=0.2)
    url = f"http://127.0.0.1:{port}/mutexcron/metrics/"
    seen: list[object] = []

    def agrees() -> dict[tuple[str, str], float] | None:
        """A scrape that counts every body run so far (the metric follows the body: the ledger comes first)."""
        samples = scrape(url)
        bodies = site.bodies()
        seen.append((samples, len(bodies)))
        if samples is None or samples.get(("mutexcron_job_runs_total", "succeeded")) != len(bodies):
            return None
        return samples

    samples = wait_until(agrees, timeout=20, what="the metrics to count every run", interval=0.1)
    succeeded = samples[("mutexcron_job_runs_total", "succeeded")]
    per_worker = {pid: sum(1 for body in site.bodies() if body["pid"] == pid) for pid in workers}
    assert succeeded > max(per_worker.values()), f"{succeeded} runs served; the ledgers say {per_worker}"
    assert samples[("mutexcron_job_duration_seconds_count", "")] == succeeded
    assert samples[("mutexcron_job_lateness_seconds_count", "")] == succeeded
    skips = sum(value for (name, outcome), value in samples.items()
                if name == "mutexcron_job_runs_total" and outcome.startswith("skipped"))
    assert skips >= 1, samples  # the other worker's fires of the same ticks
    assert ("mutexcron_job_last_success_timestamp_seconds", "") in samples  # one value (max), not one per pid
    for pid in workers:  # each worker kept its own files
        assert (files / f"counter_{pid}.db").exists(), sorted(p.name for p in files.iterdir())
    print(f"gunicorn workers {sorted(workers)}: {per_worker} runs each, {succeeded:.0f} served by the metrics "
          f"view, {skips:.0f} skips")

"""What metrics and tracing add to a guarded run (bench/lock_overhead.py runs this after the lock overhead).

Each variant is a Scheduler with ``metrics=True`` and/or ``tracing=True``, timed against the same scheduler
without them (the baseline), on the same store, taking turns in blocks like the lock benchmark. Variants:

* ``metrics``: prometheus-client in-process (not multiprocess mode);
* ``tracing, API only``: opentelemetry-api with no SDK (the default no-op tracer): what a library user pays;
* ``tracing, SDK``: the SDK's TracerProvider with a BatchSpanProcessor (what OpenTelemetry recommends for
  production: spans are queued in the calling thread and exported from a thread of its own) and an exporter
  that drops them (no I/O);
* ``metrics + tracing, API only``: both options on, as a library user turns them on (the issue's target);
* ``metrics + tracing, SDK``.

The API-only variant runs first: the SDK's provider, once set, is the process's for good.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lock_overhead import StoreResult, _scheduler_op, measure  # bench/ is on sys.path: lock_overhead.py runs this

TARGET_RATIO = 1.10
VARIANTS = (
    ("metrics", {"metrics": True}, False),
    ("tracing, API only", {"tracing": True}, False),
    ("metrics + tracing, API only", {"metrics": True, "tracing": True}, False),
    ("tracing, SDK", {"tracing": True}, True),
    ("metrics + tracing, SDK", {"metrics": True, "tracing": True}, True),
)


@dataclass
class Cost:
    """One variant on one store: ``timing.mutexcron`` with telemetry, ``timing.raw`` the baseline without."""

    store: str
    variant: str
    timing: StoreResult
    target: bool = True  # False: shown for reference (memory://), no verdict

    @property
    def baseline(self) -> float:
        return self.timing.raw.median_us

    @property
    def added(self) -> float:
        return self.timing.mutexcron.median_us - self.baseline

    @property
    def ratio(self) -> float:
        return self.timing.mutexcron.median_us / self.baseline

    def to_json(self) -> dict[str, Any]:
        return {"store": self.store, "variant": self.variant, "runs": self.timing.runs,
                "rounds": self.timing.rounds, "baseline_us": round(self.baseline, 2),
                "with_us": round(self.timing.mutexcron.median_us, 2), "added_us": round(self.added, 2),
                "ratio": round(self.ratio, 3), "target_ratio": TARGET_RATIO if self.target else None,
                "verdict": (("PASS" if self.ratio <= TARGET_RATIO else "MISS") if self.target else "reference")}


def _install_sdk() -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Drop(SpanExporter):
        def export(self, spans: Sequence[Any]) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(Drop()))
    trace.set_tracer_provider(provider)


def bench_telemetry(stores: Sequence[tuple[str, Any, int, bool]], *, rounds: int, warmup: int,
                    cpu: int | None) -> list[Cost]:
    """``stores``: (label, store, runs per round, judged against the target). Returns one Cost per variant and
    store, in VARIANTS order. Timed like the lock overhead (lock_overhead.measure: the two sides in turns)."""
    costs: list[Cost] = []
    sdk = False
    for variant, options, needs_sdk in VARIANTS:
        if needs_sdk and not sdk:
            _install_sdk()
            sdk = True
        for label, store, runs, target in stores:
            cost = Cost(label, variant, StoreResult(label), target=target)
            (plain, baseline), (telemetry, variant_op) = _scheduler_op(store), _scheduler_op(store, **options)
            try:
                measure(cost.timing, variant_op, baseline, runs=runs, rounds=rounds, warmup=warmup, cpu=cpu)
            finally:
                plain.shutdown()
                telemetry.shutdown()
            costs.append(cost)
    return costs


def print_costs(costs: Sequence[Cost]) -> None:
    print(f"telemetry cost: guarded no-op runs (Scheduler.run_now) with metrics/tracing vs without; target "
          f"<= {TARGET_RATIO:.2f}x on a real store")
    header = f"{'store':<7} {'variant':<28} {'without us':>10} {'with us':>9} {'added us':>9} {'ratio':>7}  verdict"
    print(header)
    print("-" * len(header))
    for cost in costs:
        data = cost.to_json()
        print(f"{cost.store:<7} {cost.variant:<28} {data['baseline_us']:>10.1f} {data['with_us']:>9.1f} "
              f"{data['added_us']:>9.1f} {data['ratio']:>6.3f}x  {data['verdict']}")


def run(redis_url: str | None, *, runs: int | None, rounds: int, warmup: int | None,
        cpu: int | None = None) -> list[Cost]:
    """The telemetry costs on Redis (``redis_url``, keys under a unique prefix, removed after; None: skip it)
    and on memory:// (for reference: no network, so the ratio is the harshest)."""
    from mutexcron.stores import MemoryLockStore, store_from_url

    prefix = f"mutexcron-bench:{uuid.uuid4().hex[:12]}:"
    stores: list[tuple[str, Any, int, bool]] = []
    if redis_url is not None:
        joiner = "&" if "?" in redis_url else "?"
        stores.append(("redis", store_from_url(f"{redis_url}{joiner}prefix={prefix}"), runs or 2000, True))
    stores.append(("memory", MemoryLockStore(), runs or 5000, False))
    try:
        return bench_telemetry(stores, rounds=rounds, warmup=warmup if warmup is not None else 400, cpu=cpu)
    finally:
        for _, store, _, _ in stores:
            store.close()
        if redis_url is not None:
            import redis

            client = redis.Redis.from_url(redis_url)
            keys = list(client.scan_iter(match=prefix + "*", count=1000))
            if keys:
                client.delete(*keys)
            client.close()

"""What runs with a body, on a scheduler and on a task worker alike: :mod:`.body` (one body run: heartbeat,
timeout, pings, telemetry, release, failure count, record), :mod:`.heartbeats` (the lease renewed, the timeout
told), :mod:`.limits` (``timeout`` and ``start_deadline``), :mod:`.failures` (failed runs in a row,
``pause_on_failure``), and :mod:`.pings` with :mod:`.ping_http` (``ping_url``; its URLs: :mod:`mutexcron.ping_urls`)."""

"""Real faults (issue 11): servers killed and restarted, connections cut by the server, a holder paused past its
lease, a slow then broken link. Every test brings the server it breaks (a redis-server of its own, a PostgreSQL
database of its own, a RabbitMQ vhost of its own), so the suites that run beside it are never disturbed."""

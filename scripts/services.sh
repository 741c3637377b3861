#!/usr/bin/env bash
# Start the servers the tests need if they are not already running (the machine usually starts them).
# MongoDB is not started here: the test suite starts its own MongoDB wire server (tests/support/servers.py).
set -u

wait_for() {  # wait_for NAME COMMAND...: poll until COMMAND succeeds, at most 90 s
    local name=$1; shift
    for _ in $(seq 1 180); do
        "$@" >/dev/null 2>&1 && return 0
        sleep 0.5
    done
    echo "services: $name did not come up" >&2
    return 1
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

if ! redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; then
    echo "services: starting Redis"
    mkdir -p /var/lib/redis /var/log/redis
    redis-server --daemonize yes --bind 127.0.0.1 -::1 --port 6379 --save "" --appendonly no \
        --dir /var/lib/redis --logfile /var/log/redis/ci.log
    wait_for Redis redis-cli -h 127.0.0.1 -p 6379 ping || exit 1
fi

source "$(dirname "$0")/redis-scale-out.sh"
redis_scale_out || exit 1  # the Redis Cluster (7000-7005) and Sentinel group (7100, 26380-26382)

if ! port_open 5432; then
    echo "services: starting PostgreSQL"
    pg_ctlcluster --skip-systemctl-redirect "$(ls /etc/postgresql | head -n 1)" main start
    wait_for PostgreSQL port_open 5432 || exit 1
fi

if ! port_open 3306; then
    echo "services: starting MariaDB"
    start-stop-daemon --start --oknodo --background --exec /usr/sbin/mariadbd
    wait_for MariaDB port_open 3306 || exit 1
fi

if ! port_open 5672; then
    echo "services: starting RabbitMQ"
    rabbitmq-server -detached
    wait_for RabbitMQ port_open 5672 || exit 1
fi
echo "services: Redis (alone, as a cluster and under Sentinel), PostgreSQL, MariaDB and RabbitMQ are up"

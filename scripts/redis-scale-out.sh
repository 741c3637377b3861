# Sourced by scripts/services.sh (which defines wait_for): redis_scale_out starts the shared Redis Cluster and
# Sentinel group of the tests (README, "Scaling out") from the installed redis-server when they are not already
# up, and is quick when they are.
#
#   cluster:  3 masters and 3 replicas on 127.0.0.1:7000-7005 (redis+cluster://127.0.0.1:7000,127.0.0.1:7001)
#   sentinel: master 127.0.0.1:7100, replica 127.0.0.1:7101, sentinels 127.0.0.1:26380-26382, service
#             "mutexcron" (redis+sentinel://127.0.0.1:26380,127.0.0.1:26381,127.0.0.1:26382/mutexcron)
#
# No test kills or fails over these servers (the failover tests start their own on free ports), so their
# timeouts are Redis's defaults. Their files live in $MUTEXCRON_SCALE_OUT_DIR (default /tmp/mutexcron-scale-out).
DIR=${MUTEXCRON_SCALE_OUT_DIR:-/tmp/mutexcron-scale-out}
CLUSTER_PORTS=(7000 7001 7002 7003 7004 7005)
SENTINEL_DATA_PORTS=(7100 7101)
SENTINEL_PORTS=(26380 26381 26382)
SERVICE=mutexcron

cli() { redis-cli -h 127.0.0.1 -p "$@" 2>/dev/null; }
answers() { [ "$(cli "$1" ping)" = PONG ]; }

# Stop a server of ours on PORT (one whose working directory is under $DIR), without saving anything.
stop_ours() {
    local dir
    dir=$(cli "$1" config get dir | sed -n 2p)
    case "$dir" in "$DIR"/*) cli "$1" shutdown nosave >/dev/null ;; esac
}

data_server() {  # data_server PORT DIR [OPTIONS...]: a daemonized redis-server without persistence
    local port=$1 dir=$2; shift 2
    mkdir -p "$dir"
    redis-server --port "$port" --bind 127.0.0.1 --daemonize yes --save "" --appendonly no --dir "$dir" \
        --logfile "$dir/redis.log" --pidfile "$dir/redis.pid" "$@"
}

# -- the cluster -----------------------------------------------------------------------------------------------

cluster_ok() {
    local port
    for port in "${CLUSTER_PORTS[@]}"; do
        cli "$port" cluster info | grep -q '^cluster_state:ok' || return 1
    done
    [ "$(cli 7000 cluster nodes | grep -c 'master')" -ge 3 ] || return 1
    [ "$(cli 7000 cluster nodes | grep -c 'slave')" -ge 3 ] || return 1
    # Every replica's link to its master is up (the tests of wait_replicas need them).
    for port in "${CLUSTER_PORTS[@]}"; do
        if cli "$port" info replication | grep -q '^role:slave'; then
            cli "$port" info replication | grep -q '^master_link_status:up' || return 1
        fi
    done
}

start_cluster() {
    local port
    echo "services: starting the Redis Cluster on 127.0.0.1:7000-7005"
    for port in "${CLUSTER_PORTS[@]}"; do
        answers "$port" && stop_ours "$port"
    done
    rm -rf "$DIR/cluster"
    for port in "${CLUSTER_PORTS[@]}"; do
        if answers "$port"; then
            echo "services: port $port is taken by a Redis that is not ours" >&2
            return 1
        fi
        data_server "$port" "$DIR/cluster/$port" --cluster-enabled yes --cluster-config-file nodes.conf
    done
    for port in "${CLUSTER_PORTS[@]}"; do
        wait_for "cluster node $port" answers "$port" || return 1
    done
    redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CLUSTER_PORTS[@]}") --cluster-replicas 1 \
        --cluster-yes >"$DIR/cluster/create.log" 2>&1 || { cat "$DIR/cluster/create.log" >&2; return 1; }
    wait_for "Redis Cluster" cluster_ok
}

# -- the Sentinel group ----------------------------------------------------------------------------------------

sentinel_ok() {
    local port address
    for port in "${SENTINEL_PORTS[@]}"; do
        address=$(cli "$port" sentinel get-master-addr-by-name "$SERVICE" | tr '\n' ' ')
        [ -n "$address" ] || return 1
        cli "$port" sentinel master "$SERVICE" | grep -A1 '^num-other-sentinels$' | tail -n 1 | grep -q '^2$' \
            || return 1
    done
    set -- $address
    cli "$2" info replication | grep -q '^role:master' || return 1
    cli "$2" info replication | grep -q '^connected_slaves:1' || return 1
}

start_sentinel() {
    local port
    echo "services: starting the Sentinel group (master 7100, replica 7101, sentinels 26380-26382)"
    for port in "${SENTINEL_DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
        answers "$port" && stop_ours "$port"
    done
    rm -rf "$DIR/sentinel"
    for port in "${SENTINEL_DATA_PORTS[@]}" "${SENTINEL_PORTS[@]}"; do
        if answers "$port"; then
            echo "services: port $port is taken by a Redis that is not ours" >&2
            return 1
        fi
    done
    data_server 7100 "$DIR/sentinel/7100"
    data_server 7101 "$DIR/sentinel/7101" --replicaof 127.0.0.1 7100
    for port in "${SENTINEL_PORTS[@]}"; do
        mkdir -p "$DIR/sentinel/$port"
        cat >"$DIR/sentinel/$port/sentinel.conf" <<EOF
port $port
bind 127.0.0.1
daemonize yes
dir $DIR/sentinel/$port
logfile $DIR/sentinel/$port/sentinel.log
pidfile $DIR/sentinel/$port/sentinel.pid
sentinel monitor $SERVICE 127.0.0.1 7100 2
EOF
        redis-server "$DIR/sentinel/$port/sentinel.conf" --sentinel
    done
    wait_for "Sentinel group" sentinel_ok
}

redis_scale_out() {
    local status=0
    cluster_ok || start_cluster || status=1
    sentinel_ok || start_sentinel || status=1
    return "$status"
}

#!/usr/bin/env bash
# System packages the Python dependencies build against: mysqlclient needs the MariaDB client headers.
set -eu
if pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null; then
    exit 0
fi
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "system-deps: installing libmariadb-dev (for mysqlclient)"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq libmariadb-dev pkg-config >/dev/null
else
    echo "system-deps: install the MariaDB/MySQL client headers (Debian: apt-get install libmariadb-dev)" >&2
    exit 1
fi

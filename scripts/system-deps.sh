#!/usr/bin/env bash
# Debian packages the tests need: the MariaDB client headers (to build mysqlclient) and Chromium with
# its driver (for the admin's browser test). Installed only when missing.
set -eu
missing=()
pkg-config --exists libmariadb 2>/dev/null || pkg-config --exists mysqlclient 2>/dev/null \
    || missing+=(libmariadb-dev pkg-config)
[ -x /usr/bin/chromium ] || missing+=(chromium)
[ -x /usr/bin/chromedriver ] || missing+=(chromium-driver)
[ ${#missing[@]} -eq 0 ] && exit 0
if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    echo "system-deps: installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
else
    echo "system-deps: please install: ${missing[*]} (Debian package names)" >&2
    exit 1
fi

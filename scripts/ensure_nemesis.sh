#!/bin/sh
# Installs what the nemesis tests (tests/nemesis/, marker `nemesis`) need besides `ip`:
# Debian's `iptables`, to cut links between network namespaces. A no-op when present.
# Runs `apt-get install -y`, and `apt-get update` only when that install fails.
# Needs root (the nemesis tests run as root anyway); without it, says so and exits 0:
# the nemesis tests then skip, saying why, and the rest of the suite runs.
set -eu

if command -v iptables >/dev/null 2>&1 && command -v iptables-restore >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_nemesis: iptables is missing and this user is not root: the nemesis" \
        "tests will skip (run 'apt-get install -y iptables' as root)" >&2
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_nemesis: no apt-get here: install iptables by hand" >&2
    exit 2
fi

echo "ensure_nemesis: installing iptables (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
if ! apt-get install -y -q --no-install-recommends iptables >&2; then
    apt-get update -q >&2
    apt-get install -y -q --no-install-recommends iptables >&2
fi

if ! command -v iptables-restore >/dev/null 2>&1; then
    echo "ensure_nemesis: installed, but iptables-restore is still missing" >&2
    exit 2
fi

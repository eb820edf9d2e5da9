#!/bin/sh
# Installs the headless browser the web console tests drive (tests/web/): Debian's
# `chromium` and `chromium-driver` (/usr/bin/chromium, /usr/bin/chromedriver).
# A no-op when both are present. Runs `apt-get update` once, then `apt-get install -y`.
# Needs root (or sudo without a password); exits non-zero, saying why, when it cannot install.
set -eu

if [ -x /usr/bin/chromium ] && [ -x /usr/bin/chromedriver ]; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "ensure_browser: chromium and chromium-driver are missing and this user cannot" \
        "install them: run 'apt-get install -y chromium chromium-driver' as root" >&2
    exit 2
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_browser: no apt-get here: install chromium and its chromedriver by hand" \
        "(/usr/bin/chromium, /usr/bin/chromedriver)" >&2
    exit 2
fi

echo "ensure_browser: installing chromium and chromium-driver (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q >&2
$SUDO apt-get install -y -q --no-install-recommends chromium chromium-driver >&2

if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then
    echo "ensure_browser: installed, but /usr/bin/chromium or /usr/bin/chromedriver is" \
        "still missing" >&2
    exit 2
fi

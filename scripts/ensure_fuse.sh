#!/bin/sh
# Installs what the power-loss tests (tests/nemesis/lazyfs.py) mount their FUSE file system
# with: Debian's `libfuse2` (the library fusepy loads through ctypes) and `fuse` (fusermount,
# /etc/fuse.conf). A no-op when both are present. Runs `apt-get update` once, then
# `apt-get install -y`. Needs root (or sudo without a password); exits non-zero, saying why,
# when it cannot install. The tests also need /dev/fuse (a container must be given it).
set -eu

have_lib() {
    ldconfig -p 2>/dev/null | grep -q 'libfuse\.so\.2'
}

if have_lib && command -v fusermount >/dev/null 2>&1; then
    exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
    SUDO=""
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
    SUDO="sudo -n"
else
    echo "ensure_fuse: libfuse2 and fuse are missing and this user cannot install them:" \
        "run 'apt-get install -y fuse libfuse2' as root" >&2
    exit 2
fi

if ! command -v apt-get >/dev/null 2>&1; then
    echo "ensure_fuse: no apt-get here: install libfuse 2 (libfuse.so.2) and fusermount" \
        "by hand" >&2
    exit 2
fi

echo "ensure_fuse: installing fuse and libfuse2 (apt-get)" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q -o DPkg::Lock::Timeout=300 >&2
# Other installers may hold the dpkg lock (./dev test runs several ensure scripts): wait for it.
$SUDO apt-get install -y -q -o DPkg::Lock::Timeout=300 --no-install-recommends fuse libfuse2 >&2

if ! have_lib || ! command -v fusermount >/dev/null 2>&1; then
    echo "ensure_fuse: installed, but libfuse.so.2 or fusermount is still missing" >&2
    exit 2
fi

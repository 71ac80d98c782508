#!/usr/bin/env bash
# Install one Debian package with apt-get, as root or through sudo, saying what it does;
# the shared half of scripts/setup-system.sh and scripts/setup-browser.sh.
#
#   scripts/apt-install.sh NAME PACKAGE
#
# NAME is who is talking (the calling script's name, for its messages). Exits non-zero,
# saying why and what to do, when it cannot install.
set -euo pipefail

name="$1"
package="$2"

say() { printf '%s: %s\n' "$name" "$*"; }
fail() {
    printf '%s: error: %s\n' "$name" "$*" >&2
    exit 1
}

if ! command -v apt-get >/dev/null 2>&1; then
    fail "$package is missing and this is not a Debian-like system (no apt-get); install" \
        "it with your system's package manager"
fi

sudo_note=""
if [ "${EUID}" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        fail "$package is missing; installing it needs root, and sudo is not available:" \
            "run 'apt-get install $package' as root"
    fi
    sudo_note="sudo "
fi

# Run a command as root: directly when we are root, else through sudo.
as_root() {
    if [ "${EUID}" -eq 0 ]; then
        "$@"
    else
        sudo DEBIAN_FRONTEND=noninteractive "$@"
    fi
}

export DEBIAN_FRONTEND=noninteractive
say "$package is missing: installing Debian's $package package"
say "running: ${sudo_note}apt-get update"
if ! as_root apt-get update -qq >/dev/null; then
    fail "'apt-get update' failed; check the network and the apt sources, then run again"
fi
say "running: ${sudo_note}apt-get install -y $package"
if ! as_root apt-get install -y -qq --no-install-recommends "$package" >/dev/null; then
    fail "'apt-get install $package' failed; see the messages above"
fi

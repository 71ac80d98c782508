#!/usr/bin/env bash
# Install the browser the web console's end-to-end test drives: Debian's `chromium`
# (tests/serve/test_console_browser.py launches /usr/bin/chromium through Playwright's own
# driver; we never download a browser build, only the distribution's package).
#
# Idempotent: does nothing (and says so) when /usr/bin/chromium is already installed.
# Otherwise it installs Debian's `chromium` package with apt-get, through sudo when not
# root. Exits non-zero, saying why, when it cannot.
#
#   scripts/setup-browser.sh
set -euo pipefail

CHROMIUM=/usr/bin/chromium

say() { printf 'setup-browser: %s\n' "$*"; }
fail() {
    printf 'setup-browser: error: %s\n' "$*" >&2
    exit 1
}

if [ -x "$CHROMIUM" ]; then
    say "chromium is already installed ($CHROMIUM); nothing to do"
    exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
    fail "chromium is missing and this is not a Debian-like system (no apt-get); install" \
        "Chromium with your system's package manager so that $CHROMIUM exists"
fi

sudo_note=""
if [ "${EUID}" -ne 0 ]; then
    if ! command -v sudo >/dev/null 2>&1; then
        fail "chromium is missing; installing it needs root, and sudo is not available:" \
            "run 'apt-get install chromium' as root"
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
say "chromium is missing: installing Debian's chromium package"
say "running: ${sudo_note}apt-get update"
if ! as_root apt-get update -qq >/dev/null; then
    fail "'apt-get update' failed; check the network and the apt sources, then run again"
fi
say "running: ${sudo_note}apt-get install -y chromium"
if ! as_root apt-get install -y -qq --no-install-recommends chromium >/dev/null; then
    fail "'apt-get install chromium' failed; see the messages above"
fi

if [ ! -x "$CHROMIUM" ]; then
    fail "the chromium package was installed but $CHROMIUM is missing"
fi
say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium) at $CHROMIUM"

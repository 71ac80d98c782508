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

"$(dirname "$0")/apt-install.sh" setup-browser chromium

if [ ! -x "$CHROMIUM" ]; then
    fail "the chromium package was installed but $CHROMIUM is missing"
fi
say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium) at $CHROMIUM"

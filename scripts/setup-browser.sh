#!/usr/bin/env bash
# Install the browser the web console's end-to-end test drives: Debian's `chromium`
# (tests/serve/test_console_browser.py launches /usr/bin/chromium through Playwright's own
# driver; we never download a browser build, only the distribution's package). Then the
# npm packages the browser tests inject into the page, pinned in tests/serve/node's
# package-lock.json: axe-core, the accessibility check (and @ag-ui/client beside it).
#
# Idempotent: does nothing (and says so) when /usr/bin/chromium is already installed and
# the npm packages are there. Otherwise it installs Debian's `chromium` package with
# apt-get, through sudo when not root, and Debian's `npm` when npm is missing, then runs
# `npm ci`. Exits non-zero, saying why, when it cannot.
#
#   scripts/setup-browser.sh
set -euo pipefail

CHROMIUM=/usr/bin/chromium

say() { printf 'setup-browser: %s\n' "$*"; }
fail() {
    printf 'setup-browser: error: %s\n' "$*" >&2
    exit 1
}

NODE_DIR="$(cd "$(dirname "$0")/.." && pwd)/tests/serve/node"

install_npm_packages() {
    if [ -f "$NODE_DIR/node_modules/axe-core/axe.min.js" ]; then
        say "the browser tests' npm packages are already installed ($NODE_DIR); nothing to do"
        return
    fi
    if ! command -v npm >/dev/null 2>&1; then
        "$(dirname "$0")/apt-install.sh" setup-browser npm
    fi
    say "running: npm ci in $NODE_DIR (axe-core, @ag-ui/client)"
    if ! (cd "$NODE_DIR" && npm ci --no-audit --no-fund --loglevel=error); then
        fail "'npm ci' in $NODE_DIR failed; it needs the npm registry (or a warm npm cache)"
    fi
}

if [ -x "$CHROMIUM" ]; then
    say "chromium is already installed ($CHROMIUM); nothing to do"
else
    "$(dirname "$0")/apt-install.sh" setup-browser chromium
    if [ ! -x "$CHROMIUM" ]; then
        fail "the chromium package was installed but $CHROMIUM is missing"
    fi
    say "installed $("$CHROMIUM" --version 2>/dev/null || echo chromium) at $CHROMIUM"
fi
install_npm_packages

#!/usr/bin/env bash
# Install what tiller needs from the system, not from PyPI: bubblewrap (`bwrap`), the
# sandbox every shell command runs in (DESIGN §11). With `--browser`, also Debian's
# Chromium, which the web console's browser test drives (scripts/setup-browser.sh).
#
# Idempotent: does nothing (and says so) when `bwrap` is already installed. Otherwise it
# installs Debian's `bubblewrap` package with apt-get, through sudo when not root. Exits
# non-zero, saying why, when it cannot.
#
#   scripts/setup-system.sh [--browser]
set -euo pipefail

browser=0
for arg in "$@"; do
    case "$arg" in
        --browser) browser=1 ;;
        *)
            printf 'setup-system: error: unknown option %s (the only one is --browser)\n' "$arg" >&2
            exit 2
            ;;
    esac
done
# Runs on every exit path below that succeeds, including "bwrap is already installed".
then_browser() {
    if [ "$browser" -eq 1 ]; then
        exec "$(dirname "$0")/setup-browser.sh"
    fi
}

say() { printf 'setup-system: %s\n' "$*"; }
fail() {
    printf 'setup-system: error: %s\n' "$*" >&2
    exit 1
}

if command -v bwrap >/dev/null 2>&1; then
    say "bwrap is already installed ($(command -v bwrap)); nothing to do"
    then_browser
    exit 0
fi

"$(dirname "$0")/apt-install.sh" setup-system bubblewrap

if ! command -v bwrap >/dev/null 2>&1; then
    fail "bubblewrap was installed but bwrap is not on PATH ($PATH)"
fi
say "installed $(bwrap --version 2>/dev/null || echo bwrap) at $(command -v bwrap)"
then_browser

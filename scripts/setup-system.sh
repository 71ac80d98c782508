#!/usr/bin/env bash
# Install what tiller needs from the system, not from PyPI: bubblewrap (`bwrap`), the
# sandbox every shell command runs in (DESIGN §11). With `--browser`, also Debian's
# Chromium, which the web console's browser test drives (scripts/setup-browser.sh).
# With `--sandbox-user`, also the `tiller-sandbox` system user: when tiller runs as root,
# commands in a root-owned workspace run as that user (without it, as `nobody`). Optional:
# the default works without it. `setpriv` (util-linux, on every Debian system) drops to it.
#
# Idempotent: does nothing (and says so) when `bwrap` is already installed. Otherwise it
# installs Debian's `bubblewrap` package with apt-get, through sudo when not root. Exits
# non-zero, saying why, when it cannot.
#
#   scripts/setup-system.sh [--browser] [--sandbox-user]
set -euo pipefail

browser=0
sandbox_user=0
for arg in "$@"; do
    case "$arg" in
        --browser) browser=1 ;;
        --sandbox-user) sandbox_user=1 ;;
        *)
            printf 'setup-system: error: unknown option %s (options: --browser, --sandbox-user)\n' \
                "$arg" >&2
            exit 2
            ;;
    esac
done
# Runs on every exit path below that succeeds, including "bwrap is already installed".
then_browser() {
    if [ "$sandbox_user" -eq 1 ]; then
        make_sandbox_user
    fi
    if [ "$browser" -eq 1 ]; then
        exec "$(dirname "$0")/setup-browser.sh"
    fi
}

say() { printf 'setup-system: %s\n' "$*"; }
fail() {
    printf 'setup-system: error: %s\n' "$*" >&2
    exit 1
}

make_sandbox_user() {
    if getent passwd tiller-sandbox >/dev/null 2>&1; then
        say "the tiller-sandbox user already exists; nothing to do"
        return
    fi
    local run=()
    if [ "${EUID}" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 || fail "creating a user needs root, and sudo is not available"
        run=(sudo)
    fi
    "${run[@]}" useradd --system --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin --user-group tiller-sandbox
    say "created the tiller-sandbox system user ($(id tiller-sandbox))"
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

"""`tiller demo` shows an approval: on a terminal it asks (here: answered `y`); without one
it prints the held call and its scripted approver approves it. Either way it exits 0."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")


def test_on_a_terminal_the_demo_asks_before_editing_the_code() -> None:
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tiller", "demo", "--no-steer"],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        env={**os.environ, "COLUMNS": "200", "NO_COLOR": "1"},
        close_fds=True,
    )
    os.close(slave)
    seen = b""

    def read_until(text: str) -> str:
        nonlocal seen
        deadline = time.monotonic() + 60  # a hang guard, not a timing assertion
        while text.encode() not in ANSI.sub(b"", seen):
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r} in:\n{ANSI.sub(b'', seen).decode()}")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
        return ANSI.sub(b"", seen).decode(errors="replace")

    try:
        asked = read_until("[y]es / [a]lways / [n]o")
        assert "allow edit_file(path='invoice.py'" in asked
        os.write(master, b"y\n")
        out = read_until("files changed:")
    finally:
        proc.wait(timeout=60)
        os.close(master)
    assert proc.returncode == 0, out
    assert "held for approval" not in out  # a person answered; nothing was scripted


def test_without_a_terminal_the_scripted_approver_answers() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "tiller", "demo", "--no-steer"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "⏸ held for approval: edit_file(path='invoice.py'" in done.stdout
    assert "the demo's scripted approver approves it" in done.stdout

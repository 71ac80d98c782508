"""`tiller run` and `ask_user`: asked inline on a terminal, answered at once without one."""

from __future__ import annotations

import os
import pty
import re
import select
import subprocess
import sys
import time
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")

SCRIPT = """
turns:
  - text: "One question first."
    tool_calls:
      - name: ask_user
        arguments:
          questions:
            - header: Database
              question: Which database should the service use?
              options:
                - {label: PostgreSQL, description: robust, recommended: true}
                - {label: SQLite, description: a single file}
  - "Noted."
"""


def command(script: Path, workspace: Path) -> list[str]:
    tiller = [sys.executable, "-m", "tiller"]
    workspace.mkdir(exist_ok=True)  # -w names an existing directory
    store = f"sqlite:///{workspace.parent / 'store.db'}"
    return [
        *tiller,
        "run",
        "pick",
        "-m",
        f"scripted:{script}",
        "-w",
        str(workspace),
        "--store",
        store,
    ]


def run_piped(script: Path, workspace: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        command(script, workspace),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "COLUMNS": "200"},
    )


def test_without_a_terminal_the_agent_proceeds_on_its_own(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    done = run_piped(script, tmp_path / "ws")
    assert done.returncode == 0, done.stdout + done.stderr
    assert (
        "← ask_user: No answer: no one is available to answer; proceed on your best judgment."
        in done.stdout
    )
    assert "stop cause  completed" in done.stdout


def test_on_a_terminal_the_question_is_asked_inline(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        command(script, tmp_path / "ws"),
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
        deadline = time.monotonic() + 30  # a hang guard, not a timing assertion
        while text.encode() not in ANSI.sub(b"", seen):
            if time.monotonic() > deadline or proc.poll() is not None:
                raise AssertionError(f"never saw {text!r} in:\n{ANSI.sub(b'', seen).decode()}")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                seen += os.read(master, 65536)
        return ANSI.sub(b"", seen).decode(errors="replace")

    try:
        shown = read_until("Enter takes the recommended")
        assert "? [Database] Which database should the service use?" in shown
        assert "1. PostgreSQL — robust (recommended)" in shown
        os.write(master, b"5\n")  # no such option: asked again
        read_until("pick options between 1 and 2")
        os.write(master, b"2: no server to run\n")
        out = read_until("stop cause  completed")
    finally:
        proc.wait(timeout=30)
        os.close(master)
    assert proc.returncode == 0, out
    assert "← ask_user: The person answered:" in out
    assert "selected: SQLite" in out and "note: no server to run" in out

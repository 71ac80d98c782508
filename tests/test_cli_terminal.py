"""`tiller run` on a real terminal (a pseudo-terminal): inline approvals and steering."""

from __future__ import annotations

import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

ANSI = re.compile(rb"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07]*\x07|\r")

SCRIPT = """
turns:
  - text: "Writing two files."
    delay: 0.3
    tool_calls:
      - {name: write_file, arguments: {path: a.txt, content: "a"}}
  - tool_calls:
      - {name: write_file, arguments: {path: b.txt, content: "b"}}
  - "Done."
"""


class Terminal:
    """A child process on a pseudo-terminal, read with a hang guard (never a timing test)."""

    def __init__(self, *args: str) -> None:
        self.master, slave = pty.openpty()
        env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tiller", *args],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=env,
            close_fds=True,
        )
        os.close(slave)
        self.seen = b""

    def read_until(self, text: str, guard_s: float = 30) -> str:
        deadline = time.monotonic() + guard_s
        while text.encode() not in ANSI.sub(b"", self.seen):
            if time.monotonic() > deadline:
                raise AssertionError(f"never saw {text!r} in:\n{self.plain}")
            ready, _, _ = select.select([self.master], [], [], 0.5)
            if ready:
                try:
                    self.seen += os.read(self.master, 65536)
                except OSError:  # the child closed the terminal
                    if self.proc.poll() is not None:
                        break
        return self.plain

    def type(self, line: str) -> None:
        os.write(self.master, line.encode() + b"\n")

    @property
    def plain(self) -> str:
        return ANSI.sub(b"", self.seen).decode(errors="replace")

    def wait(self) -> int:
        code = self.proc.wait(timeout=30)
        while True:
            ready, _, _ = select.select([self.master], [], [], 0.2)
            if not ready:
                break
            try:
                chunk = os.read(self.master, 65536)
            except OSError:
                break
            if not chunk:
                break
            self.seen += chunk
        os.close(self.master)
        return code


def test_approve_deny_with_a_reason_and_steer(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    workspace = tmp_path / "ws"
    workspace.mkdir()  # -w names an existing directory
    term = Terminal("run", "write files", "-m", f"scripted:{script}", "-w", str(workspace))
    term.read_until("type a line at any time to steer")
    term.type("please keep it short")  # typed while the first step is still streaming
    term.read_until("allow write_file(path='a.txt'")
    term.type("y")
    term.read_until("allow write_file(path='b.txt'")
    term.type("n")
    term.read_until("reason (optional)")
    term.type("b is not needed")
    assert term.wait() == 0, term.plain
    out = term.plain
    assert "steer please keep it short" in out
    assert "Denied by the user: b is not needed" in out
    assert (workspace / "a.txt").read_text() == "a"
    assert not (workspace / "b.txt").exists()
    assert "stop cause  completed" in out


def test_the_prompt_says_why_it_asks_and_the_risk(tmp_path: Path) -> None:
    """Pins the break where the inline approval prompt showed only the call: the policy's
    reason and the risk class reached headless records, never the person at the
    terminal, who had to approve without knowing why they were asked."""
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    workspace = tmp_path / "ws"
    workspace.mkdir()  # -w names an existing directory
    term = Terminal("run", "write files", "-m", f"scripted:{script}", "-w", str(workspace))
    term.read_until("allow write_file(path='a.txt'")
    out = term.read_until("(risk: file_mutation)")
    prompt = out[out.index("allow write_file(path='a.txt'") :]
    why = next(line for line in prompt.splitlines() if line.strip().startswith("why:"))
    assert "why: ask mode asks before file_mutation: `write_file` writes `a.txt`" in why
    term.type("n")
    term.read_until("reason (optional)")
    term.type("")
    term.read_until("allow write_file(path='b.txt'")
    term.type("y")
    assert term.wait() == 0, term.plain
    assert term.plain.count("(risk: file_mutation)") == 2  # each prompt says it


def test_always_remembers_the_tool(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    workspace = tmp_path / "ws"
    workspace.mkdir()  # -w names an existing directory
    term = Terminal("run", "write files", "-m", f"scripted:{script}", "-w", str(workspace))
    term.read_until("allow write_file(path='a.txt'")
    term.type("a")
    assert term.wait() == 0, term.plain
    assert term.plain.count("allow write_file") == 1  # the second write was not asked
    assert (workspace / "b.txt").read_text() == "b"


def test_ctrl_c_cancels_cleanly_and_keeps_what_was_said(tmp_path: Path) -> None:
    script = tmp_path / "slow.yaml"
    script.write_text(
        "turns:\n"
        "  - text: 'Reading everything first.'\n"
        "    tool_calls: [{name: list_dir, arguments: {}}]\n"
        "  - {text: 'never sent', delay: 60}\n"
    )
    term = Terminal("run", "look", "-m", f"scripted:{script}", "-w", str(tmp_path))
    term.read_until("← list_dir")
    term.proc.send_signal(signal.SIGINT)
    assert term.wait() == 1, term.plain
    out = term.plain
    assert "cancelling" in out
    assert "stop cause  cancelled" in out
    assert "never sent" not in out

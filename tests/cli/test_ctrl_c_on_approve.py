"""Ctrl+C while `tiller approve` runs the resumed run cancels it cleanly, as in `tiller
run` (review of issue 18). Before: the interrupt tore the process down with a traceback
(the event log's writer found the store closed), and no summary said how it ended."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

from ..cli_support import tiller

SLOW_AFTER_APPROVAL = '''
import asyncio

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import builtin, tool


@tool(read_only=True)
async def wait() -> str:
    """Wait a long time."""
    await asyncio.sleep(60)
    return "waited"


def _next(messages, info):
    answered = sum(1 for m in messages if getattr(m, "tool_results", ()))
    if answered == 0:
        arguments = {"path": "a.txt", "content": "x"}
        return {"tool_calls": [{"name": "write_file", "arguments": arguments}]}
    if answered == 1:
        return {"tool_calls": [{"name": "wait", "arguments": {}}]}
    return "done"


def make(model=None):
    return Agent(ScriptedModel(_next), [wait, builtin.write_file], name="slow")
'''


def test_ctrl_c_cancels_the_resumed_run_cleanly(tmp_path: Path) -> None:
    (tmp_path / "slow_agent.py").write_text(SLOW_AFTER_APPROVAL)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "--agent", "slow_agent:make", "-w", "ws", "--store", store,
                  cwd=tmp_path)  # fmt: skip
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    out = tmp_path / "approve.out"
    with out.open("w") as sink:
        approving = subprocess.Popen(
            [sys.executable, "-m", "tiller", "approve", approval_id, "--store", store],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            # A person's Ctrl+C: SIGINT as a terminal delivers it (not ignored, as it is
            # for a background job).
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 60
            while "→ wait()" not in out.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            approving.send_signal(signal.SIGINT)
            approving.wait(timeout=60)
        finally:
            approving.kill()
    shown = out.read_text()
    assert "Traceback" not in shown, shown
    assert "stop cause  cancelled" in shown, shown
    assert approving.returncode == 1, shown


def test_ctrl_c_cancels_a_run_continued_by_runs_resume_cleanly(tmp_path: Path) -> None:
    # `tiller runs resume` continues a run as `tiller approve` does, and a person's Ctrl+C
    # there is the same: the run ends cancelled, with its summary, not a traceback.
    (tmp_path / "slow_agent.py").write_text(SLOW_AFTER_APPROVAL)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "--agent", "slow_agent:make", "-w", "ws", "--store", store,
                  cwd=tmp_path)  # fmt: skip
    (run_id,) = set(re.findall(r"\b(run-[0-9a-f]+)\b", held.stdout))
    out = tmp_path / "resume.out"
    with out.open("w") as sink:
        resuming = subprocess.Popen(
            [sys.executable, "-m", "tiller", "runs", "resume", run_id, "--yes", "--store", store],
            cwd=tmp_path,
            stdin=subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
        )
        try:
            deadline = time.monotonic() + 60
            while "→ wait()" not in out.read_text() and time.monotonic() < deadline:
                time.sleep(0.1)
            resuming.send_signal(signal.SIGINT)
            resuming.wait(timeout=60)
        finally:
            resuming.kill()
    shown = out.read_text()
    assert "Traceback" not in shown, shown
    assert "stop cause  cancelled" in shown, shown
    assert resuming.returncode == 1, shown

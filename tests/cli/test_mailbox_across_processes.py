"""A run started with `--mailbox NAME` keeps its mailbox, and the `message_send` it was
given, when a person approves its held call in another process (review of issue 18).

Before: the checkpoint did not record the mailbox, so `tiller approve` resumed the run
without it: the approved `message_send` came back as an unknown tool, and mail sent to
NAME meanwhile was never delivered to the resumed run.
"""

from __future__ import annotations

import re
from pathlib import Path

from ..cli_support import tiller

SENDS_MAIL = """
from tiller.loop import Agent
from tiller.model import ScriptedModel


def _next(messages, info):
    if getattr(messages[-1], "tool_results", ()):
        said = [m.text for m in messages if getattr(m, "text", None)]
        return "after: " + " | ".join(said)
    return {"tool_calls": [
        {"name": "message_send", "arguments": {"to": "lead", "text": "ready for review"}}
    ]}


def make(model=None):
    return Agent(ScriptedModel(_next), [], name="mine")
"""


def _held_run(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "mail_agent.py").write_text(SENDS_MAIL)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "--agent", "mail_agent:make", "--mailbox", "ops", "-w", "ws",
                  "--store", store, cwd=tmp_path)  # fmt: skip
    assert held.returncode == 0, held.stdout + held.stderr
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    return store, approval_id


def test_an_approved_message_send_is_sent_from_another_process(tmp_path: Path) -> None:
    store, approval_id = _held_run(tmp_path)
    approved = tiller("approve", approval_id, "--store", store, cwd=tmp_path)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "Unknown tool" not in approved.stdout
    assert "sent to lead" in approved.stdout
    waiting = tiller("mail", "list", "--to", "lead", "--store", store, cwd=tmp_path)
    assert re.search(r"ops\s.*\slead\s.*ready for review", waiting.stdout), waiting.stdout


def test_the_resumed_run_reads_mail_sent_to_its_name(tmp_path: Path) -> None:
    store, approval_id = _held_run(tmp_path)
    sent = tiller("mail", "send", "hello ops", "--to", "ops", "--from", "lead",
                  "--store", store, cwd=tmp_path)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    approved = tiller("approve", approval_id, "--store", store, cwd=tmp_path)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "[message from agent lead] hello ops" in approved.stdout
    unread = tiller("mail", "list", "--to", "ops", "--store", store, cwd=tmp_path)
    assert "hello ops" not in unread.stdout  # delivered to the resumed run, once


def test_edited_arguments_of_a_held_message_send_are_checked(tmp_path: Path) -> None:
    store, approval_id = _held_run(tmp_path)
    approved = tiller("approve", approval_id, "--args", '{"to": "lead", "text": "edited"}',
                      "--store", store, cwd=tmp_path)  # fmt: skip
    assert approved.returncode == 0, approved.stdout + approved.stderr
    waiting = tiller("mail", "list", "--to", "lead", "--store", store, cwd=tmp_path)
    assert "edited" in waiting.stdout, waiting.stdout

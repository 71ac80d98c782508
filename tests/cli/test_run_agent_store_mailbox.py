"""`tiller run --agent`, `TILLER_STORE` for every command that takes `--store`, and
`--mailbox` on `run` and `serve` (issue 18).

Before: `tiller run` could run only the built-in coding agent (though `approve`, `deny`,
`replay` and `runs resume` took `--agent`); only `run` and `serve` read `TILLER_STORE`; and
neither `run` nor `serve` could attach a mailbox.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tiller.cli import app
from tiller.conversation import Taint
from tiller.errors import UsageError
from tiller.serve import AppSettings
from tiller.store import MailboxStore, MailIdentity, open_bus

from ..cli_support import tiller

MY_AGENT = '''
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import builtin


def _answer(messages, info):
    said = [m.text for m in messages if getattr(m, "text", None)]
    return "I read: " + " | ".join(said)


def make(model=None):
    """An agent factory: the model string if given, else its own scripted model."""
    return Agent(model or ScriptedModel(_answer), [builtin.list_dir], name="mine")
'''


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "my_agent.py").write_text(MY_AGENT)
    (tmp_path / "ws").mkdir()
    return tmp_path


def test_run_takes_your_agent_as_module_attr(project: Path) -> None:
    store = f"sqlite:///{project / 'store.db'}"
    done = tiller(
        "run", "hello", "--agent", "my_agent:make", "-w", "ws", "--store", store, cwd=project
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "assistant I read: hello" in done.stdout.splitlines()
    # The run records where its agent came from, for approve/resume in another process.
    listed = tiller("runs", "list", "--store", store, cwd=project)
    assert re.search(r"finished\s+1\s+completed\s+mine", listed.stdout), listed.stdout


def test_run_passes_model_to_your_factory(project: Path) -> None:
    script = project / "s.yaml"
    script.write_text('turns:\n  - "From the script."\n')
    done = tiller(
        "run", "hi", "--agent", "my_agent:make", "-m", f"scripted:{script}", "-w", "ws",
        "--store", "memory://", cwd=project,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "assistant From the script." in done.stdout.splitlines()


def test_run_refuses_web_with_your_agent(project: Path) -> None:
    done = tiller("run", "hi", "--agent", "my_agent:make", "--web", "-w", "ws", cwd=project)
    assert done.returncode == 2
    assert done.stderr.startswith("tiller: --web gives the built-in coding agent web_fetch")


def _store_params() -> list[tuple[str, typer.core.TyperOption]]:
    """Every `--store` option of every command, with the command's name."""
    found = []

    def walk(command: object, path: str) -> None:
        for param in getattr(command, "params", []):
            if "--store" in getattr(param, "opts", ()):
                found.append((path, param))
        for name, sub in (getattr(command, "commands", None) or {}).items():
            walk(sub, f"{path} {name}".strip())

    walk(typer.main.get_command(app), "")
    return found


def test_every_store_option_reads_tiller_store_and_says_so() -> None:
    params = _store_params()
    names = {path for path, _ in params}
    assert {"run", "serve", "worker", "submit", "approve", "deny", "runs resume"} <= names
    assert {"runs list", "replay", "rewind", "outbox send", "mail send", "eval run"} <= names
    for path, param in params:
        assert param.envvar == "TILLER_STORE", path
        assert "$TILLER_STORE" in (param.help or ""), path


def test_a_reading_command_uses_the_store_tiller_store_names(project: Path) -> None:
    store = f"sqlite:///{project / 'store.db'}"
    ran = tiller("run", "hello", "--agent", "my_agent:make", "-w", "ws", cwd=project,
                 env={"TILLER_STORE": store})  # fmt: skip
    assert ran.returncode == 0, ran.stdout + ran.stderr
    (run_id,) = re.findall(r"^(run-[0-9a-f]+)\s", tiller(
        "runs", "list", cwd=project, env={"TILLER_STORE": store}).stdout, re.M)  # fmt: skip
    for args in (["runs", "show", run_id], ["approvals", "list"], ["outbox", "list"]):
        result = CliRunner(env={"TILLER_STORE": store}).invoke(app, args)
        assert result.exit_code == 0, (args, result.output)
    shown = CliRunner(env={"TILLER_STORE": store}).invoke(app, ["runs", "show", run_id])
    assert "I read: hello" in shown.output


def test_run_with_a_mailbox_reads_what_was_sent_to_its_name(project: Path) -> None:
    store = f"sqlite:///{project / 'store.db'}"
    sent = tiller("mail", "send", "please check the logs", "--to", "ops", "--from", "lead",
                  "--store", store, cwd=project)  # fmt: skip
    assert sent.returncode == 0, sent.stderr
    done = tiller("run", "hello", "--agent", "my_agent:make", "--mailbox", "ops", "-w", "ws",
                  "--store", store, cwd=project)  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    # The message joins the step's user turn, framed as the other agent's words.
    start = lines.index("assistant I read: hello")
    assert lines[start + 1 : start + 3] == ["", "[message from agent lead] please check the logs"]
    unread = tiller("mail", "list", "--to", "ops", "--store", store, cwd=project)
    assert "please check the logs" not in unread.stdout  # delivered, once


def test_run_without_a_mailbox_leaves_the_mail_waiting(project: Path) -> None:
    store = f"sqlite:///{project / 'store.db'}"
    tiller("mail", "send", "hi", "--to", "ops", "--from", "lead", "--store", store, cwd=project)
    done = tiller("run", "hello", "--agent", "my_agent:make", "-w", "ws", "--store", store,
                  cwd=project)  # fmt: skip
    assert "assistant I read: hello" in done.stdout.splitlines()


def test_a_bad_mailbox_name_is_refused_before_the_run(project: Path) -> None:
    done = tiller("run", "hello", "--agent", "my_agent:make", "--mailbox", "no spaces!",
                  "-w", "ws", "--store", "memory://", cwd=project)  # fmt: skip
    assert done.returncode == 2
    assert len(done.stderr.splitlines()) == 1
    assert "policy:" not in done.stdout  # refused before the run began


async def test_serve_with_a_mailbox_attaches_it_to_every_run(tmp_path: Path) -> None:
    """`tiller serve --mailbox NAME` → `AppSettings.mailbox`: a served run reads mail."""
    import httpx

    from tiller.loop import load_agent
    from tiller.serve import create_app

    (tmp_path / "my_agent.py").write_text(MY_AGENT)
    import sys

    sys.path.insert(0, str(tmp_path))
    try:
        agent = load_agent("my_agent:make")
    finally:
        sys.path.remove(str(tmp_path))
    bus = await open_bus("memory://")
    await MailboxStore(bus).send(
        "ops", "deploy at noon", sender=MailIdentity("lead"), taint=Taint.NONE
    )
    app = create_app(agent, AppSettings(store=bus, token=None, workspace=tmp_path, mailbox="ops"))
    body = {
        "threadId": "t1",
        "runId": "r1",
        "state": {},
        "messages": [{"id": "u1", "role": "user", "content": "hello"}],
        "tools": [],
        "context": [],
        "forwardedProps": {},
    }
    async with app.router.lifespan_context(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
            response = await client.post("/agui", json=body)
    assert '"name":"tiller.message_delivered"' in response.text
    assert '"from":"lead","to":"ops"' in response.text
    assert '"delta":" noon"' in response.text  # the model read it
    await bus.aclose()


def test_serve_refuses_a_bad_mailbox_name() -> None:
    with pytest.raises(UsageError, match="no spaces!"):
        AppSettings(store="memory://", token=None, mailbox="no spaces!")


FAILS_AFTER_APPROVAL = """
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import builtin


def _next(messages, info):
    if getattr(messages[-1], "tool_results", ()):
        return {"error": {"status": 400, "message": "the provider refused the request"}}
    return {"tool_calls": [{"name": "write_file", "arguments": {"path": "a.txt", "content": "x"}}]}


def make(model=None):
    return Agent(ScriptedModel(_next), [builtin.write_file], name="fails")
"""


def test_a_resumed_runs_error_is_printed_once(tmp_path: Path) -> None:
    """`tiller approve` showed the run's error in the view and again in its summary."""
    (tmp_path / "fails_agent.py").write_text(FAILS_AFTER_APPROVAL)
    (tmp_path / "ws").mkdir()
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "--agent", "fails_agent:make", "-w", "ws", "--store", store,
                  cwd=tmp_path)  # fmt: skip
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    approved = tiller("approve", approval_id, "--store", store, cwd=tmp_path)
    assert approved.returncode == 1, approved.stdout + approved.stderr
    assert approved.stdout.count("the provider refused the request") == 1, approved.stdout

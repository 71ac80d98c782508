"""`tiller run` and `tiller demo`, as a user runs them: real processes, real files."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from dirty_equals import IsStr
from inline_snapshot import snapshot

from .cli_support import tiller

# The summary's rule is as wide as the terminal rich detects.
RULE = IsStr(regex=r"─+ summary ─+")

SCRIPT = """
turns:
  - text: "Writing the file."
    tool_calls:
      - {name: write_file, arguments: {path: notes/hello.txt, content: "hi there\\n"}}
  - "Wrote notes/hello.txt."
"""


def test_run_without_a_terminal_holds_writes_for_tiller_approve(tmp_path: Path) -> None:
    """Headless approval across processes: the run holds the write and exits; `tiller
    approve` in another process finishes it; the write happens once."""
    script = tmp_path / "script.yaml"
    script.write_text(SCRIPT)
    workspace = tmp_path / "ws"
    workspace.mkdir()  # -w names an existing directory
    store = f"sqlite:///{tmp_path / 'store.db'}"
    target = workspace / "notes" / "hello.txt"
    held = tiller(
        "run", "write hello", "-m", f"scripted:{script}", "-w", str(workspace), "--store", store
    )
    assert held.returncode == 0, held.stderr
    lines = held.stdout.splitlines()
    # What follows is the approve/deny hint, wrapped where the store's temp path falls.
    hint = next(n for n, line in enumerate(lines) if "tiller approve" in line)
    assert lines[hint - 1].endswith(r"content='hi there\n')")
    assert lines[:hint] == snapshot(
        [
            "policy: no tiller.toml: built-in defaults",
            "assistant Writing the file.",
            "→ write_file(path='notes/hello.txt', content='hi there⏎')",
            "  ─ steps 1 · tokens 68 in / 19 out · $0.0000",
            RULE,
            "stop cause  suspended",
            "steps       1",
            "steps 1 · tokens 68 in / 19 out · $0.0000",
            "no price known for scripted:script",
            IsStr(regex=r"run run-[0-9a-f]{12} is waiting for a person:"),
            IsStr(regex=r"  ap-[0-9a-f]{8}  write_file\(path='notes/hello\.txt', content=.*\)"),
        ]
    )
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    assert not target.exists()
    listed = tiller("approvals", "list", "--store", store)
    assert approval_id in listed.stdout and "write_file" in listed.stdout

    approved = tiller("approve", approval_id, "--store", store)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert target.read_text() == "hi there\n"
    again = tiller("approve", approval_id, "--store", store)
    assert again.returncode == 2
    assert target.read_text() == "hi there\n"  # once

    (tmp_path / "ws2").mkdir()
    allowed = tiller(
        "run", "write hello", "-m", f"scripted:{script}", "-w", str(tmp_path / "ws2"), "--yes"
    )
    assert allowed.returncode == 0, allowed.stderr
    assert (tmp_path / "ws2" / "notes" / "hello.txt").read_text() == "hi there\n"
    assert allowed.stdout.splitlines() == snapshot(
        [
            "policy: no tiller.toml: built-in defaults",
            "assistant Writing the file.",
            "→ write_file(path='notes/hello.txt', content='hi there⏎')",
            "← write_file: created notes/hello.txt (9 bytes)",
            "  ─ steps 1 · tokens 68 in / 19 out · $0.0000",
            "assistant Wrote notes/hello.txt.",
            "  ─ steps 2 · tokens 161 in / 25 out · $0.0000",
            RULE,
            "stop cause  completed",
            "steps       2",
            "steps 2 · tokens 161 in / 25 out · $0.0000",
            "no price known for scripted:script",
        ]
    )


def test_run_reports_a_bad_model_string(tmp_path: Path) -> None:
    done = tiller("run", "x", "-m", "nonsense", "-w", str(tmp_path))
    assert done.returncode == 2
    assert "openai:" in done.stderr  # the message lists the accepted forms


@pytest.mark.parametrize("flag", ["--max-steps", "--max-turns"])  # the old name, one release
def test_run_stops_at_max_steps(tmp_path: Path, flag: str) -> None:
    script = tmp_path / "loop.yaml"
    script.write_text(
        "turns:\n  - tool_calls: [{name: list_dir, arguments: {}}]\nwhen_exhausted: repeat\n"
    )
    done = tiller("run", "loop", "-m", f"scripted:{script}", "-w", str(tmp_path), flag, "3")
    assert done.returncode == 1
    assert done.stdout.splitlines() == snapshot(
        [
            "policy: no tiller.toml: built-in defaults",
            "→ list_dir()",
            "← list_dir: loop.yaml",
            "  ─ steps 1/3 · tokens 66 in / 3 out · $0.0000",
            "→ list_dir()",
            "← list_dir: loop.yaml",
            "  ─ steps 2/3 · tokens 135 in / 6 out · $0.0000",
            "→ list_dir()",
            "← list_dir: loop.yaml",
            "  ─ steps 3/3 · tokens 207 in / 9 out · $0.0000",
            RULE,
            "stop cause  step_budget (exhausted)",
            "steps       3",
            "steps 3/3 · tokens 207 in / 9 out · $0.0000",
            "no price known for scripted:loop",
        ]
    )


def test_demo_fixes_the_bug_and_honours_the_steer() -> None:
    done = tiller("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "steer Please also add a test" in out
    assert "+    amount = amount * (1 - discount_percent / 100)" in out
    assert "+    def test_full_discount_is_free(self):" in out
    assert "OK" in out and "stop cause  completed" in out
    # It plans a checklist first, and its test runs stream their output under the call.
    assert "→ task_create(subject='Find why the invoice tests fail')" in out
    assert "→ execute_command(command=" in out
    assert "   │ FAILED (failures=2)" in out and "   │ OK" in out
    assert "← execute_command: [exit code 0]" in out


def test_demo_ticks_off_its_checklist() -> None:
    done = tiller("demo")
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    assert "keeps no task checklist" not in out
    assert "    [~] t1 Find why the invoice tests fail" in out
    final = out[out.index("  tasks 3/3 done") :]
    assert final.splitlines()[1:4] == [
        "    [x] t1 Find why the invoice tests fail",
        "    [x] t2 Fix the discount calculation",
        "    [x] t3 Verify with the tests",
    ]


def test_demo_without_steering_changes_only_the_code() -> None:
    done = tiller("demo", "--no-steer")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "test_full_discount_is_free" not in done.stdout
    assert "b/invoice.py" in done.stdout


def test_run_takes_mcp_tools_and_policy_from_the_workspaces_tiller_toml(tmp_path: Path) -> None:
    """`[mcp.servers]` tools join the agent as `server__tool`; MCP tools are external
    access, so without --yes and a terminal the call is held, not run."""
    fixture = Path(__file__).parent / "tools" / "mcp_server_fixture.py"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "tiller.toml").write_text(
        f'[mcp.servers.fx]\ncommand = "{sys.executable}"\nargs = ["{fixture}"]\n'
    )
    script = tmp_path / "script.yaml"
    script.write_text(
        "turns:\n  - tool_calls: [{name: fx__echo, arguments: {text: hi, times: 2}}]\n  - Echoed.\n"
    )
    store = f"sqlite:///{tmp_path / 'store.db'}"
    base = ("run", "echo", "-m", f"scripted:{script}", "-w", str(workspace), "--store", store)
    allowed = tiller(*base, "--yes")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    assert "← fx__echo:" in allowed.stdout and "hihi" in allowed.stdout.replace(" ", "")
    held = tiller(*base)
    assert held.returncode == 0, held.stdout + held.stderr
    assert "stop cause  suspended" in held.stdout and "fx__echo" in held.stdout


#: The approving process's agent: its model goes on from the conversation (a YAML script
#: would start over in a new process, and its first call is then a new call, held again).
GOES_ON = """
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import builtin


def _next(messages, info):
    results = getattr(messages[-1], "tool_results", ()) if messages else ()
    if not results:
        write = {"path": "a.txt", "content": "x"}
        return {"tool_calls": [{"name": "write_file", "arguments": write}]}
    if results[0].name == "write_file":
        return {"tool_calls": [{"name": "read_file", "arguments": {"path": "prod.env"}}]}
    return "Done."


def agent():
    return Agent(ScriptedModel(_next), [builtin.read_file, builtin.write_file])
"""


def test_approving_in_another_process_keeps_the_workspaces_policy(tmp_path: Path) -> None:
    """Found in review: the approving process rebuilt the run without the workspace's
    tiller.toml, so a deny rule stopped applying after `tiller approve`."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    (workspace / "prod.env").write_text("API_KEY=hunter2\n")
    (workspace / "tiller.toml").write_text(
        '[[policy.rules]]\naction = "deny"\ntool = "read_file"\npath = "*.env"\n'
    )
    script = tmp_path / "script.yaml"
    script.write_text(
        "turns:\n  - tool_calls: [{name: write_file, arguments: {path: a.txt, content: x}}]\n"
    )
    (tmp_path / "goes_on_agent.py").write_text(GOES_ON)
    store = f"sqlite:///{tmp_path / 'store.db'}"
    held = tiller("run", "go", "-m", f"scripted:{script}", "-w", str(workspace), "--store", store)
    (approval_id,) = re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout)
    approved = tiller(
        "approve", approval_id, "--agent", "goes_on_agent:agent", "--store", store, cwd=tmp_path
    )
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert "hunter2" not in approved.stdout
    assert "Blocked by policy" in approved.stdout
    assert "stop cause  completed" in approved.stdout

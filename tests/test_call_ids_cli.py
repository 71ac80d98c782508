"""Law 10 through the real command: `tiller run` holds a call, `tiller approve` runs it in
a new process, and the model there — its script started over (`per_run: false`: one
position per model, and the new process's model is new) — asks for the same call under
the same provider id. That second ask is a new call: it must be held for a person,
not run on the first call's approval."""

from __future__ import annotations

import re
from pathlib import Path

from tiller.conversation import AssistantMessage, UserMessage
from tiller.state import RunState

from .cli_support import tiller

SCRIPT = """
per_run: false
turns:
  - tool_calls:
      - {name: execute_command, arguments: {command: "echo A >> ledger.txt"}}
  - "Appended A."
"""


def _checkpoint(store: Path, run_id: str) -> RunState:
    """The run's latest checkpoint, read from the SQLite file as another process would."""
    import asyncio

    from tiller.store import CheckpointStore, open_bus

    async def load() -> RunState:
        async with await open_bus(f"sqlite:///{store}") as bus:
            return (await CheckpointStore(bus, "tiller-run-checkpoints").load(run_id)).state

    return asyncio.run(load())


def test_an_approved_call_asked_again_after_the_resume_is_held(tmp_path: Path) -> None:
    """Broke: the resumed process's script asked again for `echo A >> ledger.txt` as
    `call-1-0`; the approval, looked up by that id and never spent, ran it a second time
    with no one asked, and the transcript held two calls `call-1-0`."""
    script = tmp_path / "s.yaml"
    script.write_text(SCRIPT)
    workspace = tmp_path / "ws"
    workspace.mkdir()  # -w names an existing directory
    store = tmp_path / "store.db"
    url = f"sqlite:///{store}"
    ledger = workspace / "ledger.txt"

    held = tiller(
        "run", "append A", "-m", f"scripted:{script}", "-w", str(workspace), "--store", url
    )
    assert held.returncode == 0, held.stdout + held.stderr
    assert "stop cause  suspended" in held.stdout
    (first,) = set(re.findall(r"tiller approve (ap-[0-9a-f]+)", held.stdout))
    assert not ledger.exists()

    approved = tiller("approve", first, "--store", url)
    assert approved.returncode == 0, approved.stdout + approved.stderr
    assert ledger.read_text() == "A\n"  # the approved call ran, once
    assert "stop cause  suspended" in approved.stdout  # the second ask is held
    (second,) = set(re.findall(r"tiller approve (ap-[0-9a-f]+)", approved.stdout))
    assert second != first

    listed = tiller("approvals", "list", "--store", url)
    assert listed.returncode == 0, listed.stderr
    (row,) = [line for line in listed.stdout.splitlines() if line.startswith(second)]
    run_id = row.split()[1]
    state = _checkpoint(store, run_id)
    calls = [c for m in state.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert [c.id for c in calls] == [f"{run_id}-call-1", f"{run_id}-call-2"]
    assert [c.provider_id for c in calls] == ["call-1-0", "call-1-0"]
    results = [
        r.call_id for m in state.messages if isinstance(m, UserMessage) for r in m.tool_results
    ]
    assert results == [f"{run_id}-call-1"]

    denied = tiller("deny", second, "--reason", "once is enough", "--store", url)
    assert denied.returncode == 0, denied.stdout + denied.stderr
    assert ledger.read_text() == "A\n"

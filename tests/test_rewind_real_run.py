"""Rewind after a real run: the agent's own file tools snapshot through the loop (a run
with a store), and `tiller rewind` puts the workspace back byte for byte — files the run
created deleted, files it changed restored — and cuts the conversation."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from typer.testing import CliRunner

from tiller.cli import app
from tiller.loop import Agent, FromCheckpoint, RunContext, RunOptions, recover
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import DEFAULT_BUCKET, CheckpointStore, open_bus
from tiller.tools.builtin import apply_patch, edit_file, write_file

PATCH = """\
--- a/b.txt
+++ b/b.txt
@@ -1 +1 @@
-keep
+patched
"""


def tree(root: Path) -> dict[str, bytes]:
    """Every file under `root` but tiller's own `.tiller` directory."""
    found: dict[str, bytes] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".tiller"]
        for name in filenames:
            path = Path(dirpath) / name
            found[path.relative_to(root).as_posix()] = path.read_bytes()
    return found


def test_rewind_undoes_what_the_agents_file_tools_did(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "a.txt").write_bytes(b"one\n")
    (ws / "b.txt").write_bytes(b"keep\n")
    url = f"sqlite:///{tmp_path / 'store.db'}"
    start = tree(ws)
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "new/made.txt", "content": "x"}},
                    {
                        "name": "edit_file",
                        "arguments": {"path": "a.txt", "old": "one", "new": "two"},
                    },
                ]
            },
            {"tool_calls": [{"name": "apply_patch", "arguments": {"patch": PATCH}}]},
            "done",
        ]
    )

    async def run() -> None:
        async with await open_bus(url) as bus:
            ctx = RunContext.sandboxed(ws, AllowAll()).with_store(bus)
            options = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)
            agent = Agent(model, [write_file, edit_file, apply_patch])
            result = await agent.run_in(ctx, "change things", options, run_id="r1")
            assert result.stop_cause is StopCause.COMPLETED, result.error

    asyncio.run(run())
    assert tree(ws) == {"a.txt": b"two\n", "b.txt": b"patched\n", "new/made.txt": b"x"}

    # Index 3: the prompt, the first batch and its results; the patch is undone.
    cut = CliRunner().invoke(app, ["rewind", "r1", "--to", "3", "--yes", "--store", url])
    assert cut.exit_code == 0, cut.stdout + cut.stderr
    assert tree(ws) == {"a.txt": b"two\n", "b.txt": b"keep\n", "new/made.txt": b"x"}

    # Index 1: only the prompt; everything the run did is undone, made.txt deleted.
    back = CliRunner().invoke(app, ["rewind", "r1", "--to", "1", "--yes", "--store", url])
    assert back.exit_code == 0, back.stdout + back.stderr
    assert tree(ws) == start
    assert not (ws / "new").exists()

    async def conversation_length() -> int:
        async with await open_bus(url) as bus:
            return len((await CheckpointStore(bus).load("r1")).state.messages)

    assert asyncio.run(conversation_length()) == 1


def test_a_rewound_run_replays_its_script_from_the_rewound_point(tmp_path: Path) -> None:
    """A scripted model plays its script by the run's count of model calls: a rewind puts
    that count back to where it stood at the cut, so the resumed run is answered by the
    turns that answered it there (not by turns past the script's end)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    url = f"sqlite:///{tmp_path / 'store.db'}"
    model = ScriptedModel(
        [
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "a.txt", "content": "a"}}
                ]
            },
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "b.txt", "content": "b"}}
                ]
            },
            "done",
        ]
    )
    agent = Agent(model, [write_file])

    async def run() -> None:
        async with await open_bus(url) as bus:
            ctx = RunContext.sandboxed(ws, AllowAll()).with_store(bus)
            options = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)
            result = await agent.run_in(ctx, "write two files", options, run_id="r1")
            assert result.stop_cause is StopCause.COMPLETED, result.error

    asyncio.run(run())
    assert [r.run_call for r in model.requests] == [1, 2, 3]

    # Index 3: the prompt, the first write and its result; the second write is undone.
    cut = CliRunner().invoke(app, ["rewind", "r1", "--to", "3", "--yes", "--store", url])
    assert cut.exit_code == 0, cut.stdout + cut.stderr
    assert tree(ws) == {"a.txt": b"a"}

    async def resume() -> tuple[int, StopCause | None, str]:
        async with await open_bus(url) as bus:
            rewound = (await CheckpointStore(bus).load("r1")).state
            # What `tiller runs resume` does for a rewound run (nothing waits for a decision).
            done = await recover("r1", bus, agent=agent, ctx=FromCheckpoint(approver=AllowAll()))
            return rewound.model_calls, done.stop_cause, done.text

    calls_at_cut, stop_cause, text = asyncio.run(resume())
    assert calls_at_cut == 1  # one call had answered the conversation up to the cut
    assert stop_cause is StopCause.COMPLETED
    assert text == "done"
    # The resumed run's calls are the script's second and third turns again.
    assert [r.run_call for r in model.requests] == [1, 2, 3, 2, 3]
    assert tree(ws) == {"a.txt": b"a", "b.txt": b"b"}

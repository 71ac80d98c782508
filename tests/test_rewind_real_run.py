"""Rewind after a real run: the agent's own file tools snapshot through the loop (a run
with a store), and `tiller rewind` puts the workspace back byte for byte — files the run
created deleted, files it changed restored — and cuts the conversation."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from typer.testing import CliRunner

from tiller.cli import app
from tiller.loop import Agent, RunContext, RunOptions
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

"""Rewind after a real run whose shell changed files: before `execute_command` runs, the
run snapshots the workspace, so `tiller rewind` undoes `sed -i`, `mv`, `rm`, new files and
new directories too, says which commands it undid, reports the file too large to have
been saved, and never touches what lies behind a symbolic link out of the workspace."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tiller.cli import app
from tiller.loop import Agent, RunContext, RunOptions
from tiller.model import ScriptedModel
from tiller.policy import AllowAll
from tiller.state import StopCause
from tiller.store import DEFAULT_BUCKET, open_bus
from tiller.tools import DEFAULT_SANDBOX
from tiller.tools.builtin import execute_command, write_file

pytestmark = pytest.mark.skipif(
    not DEFAULT_SANDBOX.probe().available, reason=DEFAULT_SANDBOX.probe().reason
)

BIG = 17 * 1024 * 1024  # over MAX_SAVED_FILE_BYTES

SHELL = (
    "sed -i s/one/two/ a.txt && mv b.txt moved.txt && rm gone.txt && echo new > new.txt "
    "&& mkdir -p newdir/sub && echo deep > newdir/sub/f.txt && truncate -s 18M big.bin"
)


def tree(root: Path) -> dict[str, object]:
    """Every path under `root` but `.tiller`: a file's bytes (a big one's size), a link's
    target, a directory's marker. Links are never followed."""
    found: dict[str, object] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != ".tiller"]
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            rel = path.relative_to(root).as_posix()
            if path.is_symlink():
                found[rel] = ("link", os.readlink(path))
            elif path.is_dir():
                found[rel] = "dir"
            elif path.stat().st_size > 1024 * 1024:
                found[rel] = ("size", path.stat().st_size)
            else:
                found[rel] = path.read_bytes()
    return found


def test_rewind_undoes_what_the_shell_did(tmp_path: Path) -> None:
    ws, outside = tmp_path / "ws", tmp_path / "outside"
    ws.mkdir()
    outside.mkdir()
    (outside / "theirs.txt").write_bytes(b"not the run's\n")
    (ws / "a.txt").write_bytes(b"one\n")
    (ws / "b.txt").write_bytes(b"keep\n")
    (ws / "gone.txt").write_bytes(b"bye\n")
    (ws / "src").mkdir()
    (ws / "src" / "app.py").write_bytes(b"print('hi')\n")
    with (ws / "big.bin").open("wb") as big:
        big.truncate(BIG)  # sparse: costs no disk
    (ws / "out").symlink_to(outside, target_is_directory=True)
    url = f"sqlite:///{tmp_path / 'store.db'}"
    start = tree(ws)
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "execute_command", "arguments": {"command": SHELL}}]},
            {
                "tool_calls": [
                    {"name": "write_file", "arguments": {"path": "w.txt", "content": "w"}}
                ]
            },
            "done",
        ]
    )

    async def run() -> None:
        async with await open_bus(url) as bus:
            ctx = RunContext.sandboxed(ws, AllowAll()).with_store(bus)
            options = RunOptions(checkpoint_bucket=DEFAULT_BUCKET)
            agent = Agent(model, [execute_command, write_file])
            result = await agent.run_in(ctx, "change things", options, run_id="r1")
            assert result.stop_cause is StopCause.COMPLETED, result.error

    asyncio.run(run())
    after = tree(ws)
    assert after["a.txt"] == b"two\n" and after["moved.txt"] == b"keep\n"
    assert "gone.txt" not in after and after["newdir/sub/f.txt"] == b"deep\n"
    assert after["big.bin"] == ("size", 18 * 1024 * 1024)
    # Behind the link, out of the workspace, something appears after the snapshot.
    (outside / "later.txt").write_bytes(b"also not the run's\n")

    back = CliRunner().invoke(app, ["rewind", "r1", "--to", "1", "--yes", "--store", url])
    assert back.exit_code == 0, back.stdout + back.stderr
    now = tree(ws)
    # Everything the shell and the file tool did is undone but the unsaved big file.
    assert {k: v for k, v in now.items() if k != "big.bin"} == {
        k: v for k, v in start.items() if k != "big.bin"
    }
    assert not (ws / "newdir").exists() and not (ws / "new.txt").exists()
    assert (ws / "gone.txt").read_bytes() == b"bye\n"
    assert now["big.bin"] == ("size", 18 * 1024 * 1024)
    assert "unsaved   big.bin: not restored" in back.stderr
    assert f"undo      shell: {SHELL}" in back.stdout
    # Outside the jail, nothing was touched.
    assert sorted(p.name for p in outside.iterdir()) == ["later.txt", "theirs.txt"]
    assert (outside / "theirs.txt").read_bytes() == b"not the run's\n"

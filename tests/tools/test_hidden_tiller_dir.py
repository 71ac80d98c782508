"""tiller's own files (`.tiller/`) stay out of what the agent's listings show, while the
jail still refuses writes there (law 11) and the agent's own scratchpad and spilled
outputs stay reachable by path (issue 18: `.tiller/` showed up in `list_dir` and `glob`)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.tools import ExecContext

from .file_tools_support import run


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    root = ctx.jail.root
    (root / "src").mkdir()
    (root / "src" / "app.py").write_text("TODO = 1\n")
    tiller_dir = root / ".tiller"
    (tiller_dir / "scratch" / "thread-1").mkdir(parents=True)
    (tiller_dir / "scratch" / "thread-1" / "plan.md").write_text("TODO: plan\n")
    (tiller_dir / "spill").mkdir()
    (tiller_dir / "spill" / "call-1.txt").write_text("TODO spilled\n")
    (tiller_dir / "taint.json").write_text('{"TODO": "tiller bookkeeping"}\n')
    (tiller_dir / ".gitignore").write_text("*\n")
    return root


async def test_list_dir_of_the_root_leaves_tillers_directory_out(
    ctx: ExecContext, root: Path
) -> None:
    done = await run(ctx, "list_dir")
    assert done.result.content == "src/"


async def test_listing_tillers_directory_shows_only_the_agents_own(
    ctx: ExecContext, root: Path
) -> None:
    listed = await run(ctx, "list_dir", path=".tiller")
    assert listed.result.content == "scratch/\nspill/"
    globbed = await run(ctx, "glob", pattern="**/*", path=".tiller")
    assert globbed.result.content == ".tiller/scratch/thread-1/plan.md\n.tiller/spill/call-1.txt"
    grepped = await run(ctx, "grep", pattern="TODO", path=".tiller")
    assert grepped.result.content.splitlines() == [
        ".tiller/scratch/thread-1/plan.md:1:TODO: plan",
        ".tiller/spill/call-1.txt:1:TODO spilled",
    ]


async def test_glob_and_grep_of_the_workspace_never_show_tillers_files(
    ctx: ExecContext, root: Path
) -> None:
    globbed = await run(ctx, "glob", pattern="**/*")
    assert globbed.result.content == "src/app.py"
    dotted = await run(ctx, "glob", pattern=".*")
    assert ".tiller" not in dotted.result.content
    grepped = await run(ctx, "grep", pattern="TODO")
    assert grepped.result.content == "src/app.py:1:TODO = 1"


async def test_hidden_is_not_writable_the_jail_still_protects_it(
    ctx: ExecContext, root: Path
) -> None:
    written = await run(ctx, "write_file", path=".tiller/taint.json", content="{}")
    assert written.result.is_error
    assert "protected" in written.result.content
    assert (root / ".tiller" / "taint.json").read_text() == '{"TODO": "tiller bookkeeping"}\n'
    # What a result points to is still read by its path.
    read = await run(ctx, "read_file", path=".tiller/spill/call-1.txt")
    assert "TODO spilled" in read.result.content

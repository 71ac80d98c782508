"""`search`: regex over the workspace's text files, bounded, skipping .git and binaries."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.tools import ExecContext, Outcome
from tiller.tools.builtin import search

from .conftest import RunTool


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    root = ctx.tools.root
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "app.py").write_text("import os\n\ndef main():\n    return os.getcwd()\n")
    (root / "src" / "pkg" / "util.py").write_text("def helper():\n    pass  # TODO\n")
    (root / "notes.md").write_text("TODO: write docs\n")
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("TODO in git\n")
    (root / "blob.bin").write_bytes(b"TODO\x00binary")
    return root


async def test_matches_in_file_order(run_tool: RunTool, root: Path) -> None:
    done = await run_tool("search", pattern="TODO")
    assert done.outcome is Outcome.OK
    assert (
        done.result.content == "notes.md:1: TODO: write docs\nsrc/pkg/util.py:2:     pass  # TODO"
    )


async def test_regex_path_and_glob(run_tool: RunTool, root: Path) -> None:
    done = await run_tool("search", pattern=r"^def \w+", path="src")
    assert done.result.content == "src/app.py:3: def main():\nsrc/pkg/util.py:1: def helper():"
    done = await run_tool("search", pattern="TODO", glob="*.md")
    assert done.result.content == "notes.md:1: TODO: write docs"
    done = await run_tool("search", pattern="def", glob="pkg/*.py")
    assert done.result.content == "src/pkg/util.py:1: def helper():"
    done = await run_tool("search", pattern="os", path="src/app.py")
    assert done.result.content == "src/app.py:1: import os\nsrc/app.py:4:     return os.getcwd()"


async def test_no_matches_and_errors(run_tool: RunTool, root: Path) -> None:
    done = await run_tool("search", pattern="nothing-like-this")
    assert done.result.content == "no matches for 'nothing-like-this' in ."
    assert not done.is_error
    done = await run_tool("search", pattern="(unclosed")
    assert done.is_error
    assert done.result.content.startswith("invalid regular expression '(unclosed': ")
    done = await run_tool("search", pattern="x", path="missing")
    assert done.result.content == "no such file or directory: missing"
    assert (await run_tool("search", pattern="x", path="..")).is_error


async def test_symlinks_out_of_the_jail_are_skipped(
    run_tool: RunTool, root: Path, tmp_path: Path
) -> None:
    (tmp_path / "secret.txt").write_text("TODO secret\n")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (root / "outdir").symlink_to(tmp_path)
    (root / "alias.md").symlink_to(root / "notes.md")
    done = await run_tool("search", pattern="TODO")
    assert "secret" not in done.result.content
    assert "alias.md:1: TODO: write docs" in done.result.content


async def test_output_is_bounded(run_tool: RunTool, root: Path) -> None:
    (root / "many.txt").write_text("match " + "z" * 1000 + "\n" + "match\n" * 500)
    content = (await run_tool("search", pattern="match", path="many.txt")).result.content
    lines = content.splitlines()
    assert len(lines) == 201
    assert lines[0] == "many.txt:1: match " + "z" * 294 + " [...]"
    assert lines[-1] == (
        "[stopped after 200 matches; narrow the pattern, path or glob to see the rest]"
    )


async def test_search_checks_the_token_between_files(ctx: ExecContext, root: Path) -> None:
    token = CancellationToken()
    token.cancel()
    context = ExecContext.for_test(root, token=token)
    with pytest.raises(Cancelled):
        await search.call({"pattern": "TODO"}, context)

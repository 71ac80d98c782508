"""The file tools: read_file, write_file, edit_file, list_dir, on real files in a jail."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.phase import Phase
from tiller.tools import ExecContext, Outcome, Registry, coding_tools
from tiller.tools.builtin import edit_file, list_dir, read_file, run_shell, search, write_file

from .conftest import RunTool


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    return ctx.tools.root


def test_coding_tools_and_their_flags() -> None:
    tools = coding_tools()
    assert [t.name for t in tools] == [
        "read_file",
        "list_dir",
        "search",
        "write_file",
        "edit_file",
        "run_shell",
    ]
    assert [t.name for t in tools if t.read_only] == ["read_file", "list_dir", "search"]
    registry = Registry(tools)
    assert [s.name for s in registry.specs_for(Phase.PLAN)] == ["read_file", "list_dir", "search"]
    for each in (write_file, edit_file, run_shell):
        assert each.denial_remedy
    assert coding_tools() is not coding_tools()
    assert read_file in tools and search in tools and list_dir in tools


# ── read_file ────────────────────────────────────────────────────────────────────


async def test_read_file_numbers_lines(run_tool: RunTool, root: Path) -> None:
    (root / "a.txt").write_text("alpha\nbeta\r\ngamma")
    done = await run_tool("read_file", path="a.txt")
    assert done.outcome is Outcome.OK
    assert done.result.content == "     1\talpha\n     2\tbeta\n     3\tgamma"


async def test_read_file_pages_with_offset_and_limit(run_tool: RunTool, root: Path) -> None:
    (root / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    done = await run_tool("read_file", path="n.txt", offset=3, limit=2)
    assert done.result.content == (
        "     4\tline 4\n     5\tline 5\n[lines 4-5 of 10; pass offset=5 to read on]"
    )
    done = await run_tool("read_file", path="n.txt", offset=8)
    assert done.result.content == "     9\tline 9\n    10\tline 10"
    done = await run_tool("read_file", path="n.txt", offset=10)
    assert done.result.content == "(n.txt has 10 lines; offset 10 is past the end)"


async def test_read_file_shows_2000_lines_by_default(run_tool: RunTool, root: Path) -> None:
    (root / "big.txt").write_text("x\n" * 2500)
    content = (await run_tool("read_file", path="big.txt")).result.content
    assert content.count("\tx") == 2000
    assert content.endswith("[lines 1-2000 of 2500; pass offset=2000 to read on]")


async def test_read_file_cuts_very_long_lines(run_tool: RunTool, root: Path) -> None:
    (root / "min.js").write_text("y" * 5000)
    content = (await run_tool("read_file", path="min.js")).result.content
    assert content == "     1\t" + "y" * 2000 + " [... line cut at 2000 chars]"


@pytest.mark.parametrize(
    ("setup", "path", "message"),
    [
        (None, "missing.txt", "no such file: missing.txt"),
        ("dir", "sub", "sub is a directory; use list_dir"),
        ("binary", "img.bin", "img.bin looks like a binary file (6 bytes)"),
        ("latin1", "old.txt", "old.txt is not UTF-8 text (byte 1: invalid"),
        (None, "../outside.txt", "path '../outside.txt' is outside the workspace"),
    ],
)
async def test_read_file_refusals(
    run_tool: RunTool, root: Path, setup: str | None, path: str, message: str
) -> None:
    if setup == "dir":
        (root / "sub").mkdir()
    elif setup == "binary":
        (root / "img.bin").write_bytes(b"\x89PNG\x00\x01")
    elif setup == "latin1":
        (root / "old.txt").write_bytes("café".encode("latin-1")[2:] + b"\n")
    done = await run_tool("read_file", path=path)
    assert done.outcome is Outcome.ERROR and done.is_error
    assert done.result.content.startswith(message), done.result.content


async def test_read_file_empty_file(run_tool: RunTool, root: Path) -> None:
    (root / "empty").write_text("")
    assert (await run_tool("read_file", path="empty")).result.content == "(empty is empty)"


async def test_read_file_stops_when_cancelled(ctx: ExecContext, root: Path) -> None:
    # Called directly (no registry, so no cancel scope): the sync tool checks the token
    # itself while it reads in its worker thread.
    (root / "big.txt").write_text("x\n" * 10_000)
    token = CancellationToken()
    token.cancel("stop")
    context = ExecContext.for_test(root, token=token)
    with pytest.raises(Cancelled, match="stop"):
        await read_file.call({"path": "big.txt"}, context)


async def test_read_file_through_symlinks(run_tool: RunTool, root: Path, tmp_path: Path) -> None:
    (root / "real.txt").write_text("inside\n")
    (root / "alias.txt").symlink_to(root / "real.txt")
    (tmp_path / "secret.txt").write_text("outside\n")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    assert (await run_tool("read_file", path="alias.txt")).result.content == "     1\tinside"
    done = await run_tool("read_file", path="leak.txt")
    assert done.is_error and "outside the workspace" in done.result.content
    done = await run_tool("read_file", path=str(tmp_path / "secret.txt"))
    assert done.is_error and "outside the workspace" in done.result.content


# ── write_file ───────────────────────────────────────────────────────────────────


async def test_write_file_creates_parents_and_overwrites(run_tool: RunTool, root: Path) -> None:
    done = await run_tool("write_file", path="deep/er/new.txt", content="héllo\n")
    assert done.result.content == "created deep/er/new.txt (7 bytes)"
    assert (root / "deep" / "er" / "new.txt").read_text() == "héllo\n"
    done = await run_tool("write_file", path="deep/er/new.txt", content="")
    assert done.result.content == "overwrote deep/er/new.txt (0 bytes)"
    assert (root / "deep" / "er" / "new.txt").read_text() == ""


async def test_write_file_refusals(run_tool: RunTool, root: Path, tmp_path: Path) -> None:
    (root / "adir").mkdir()
    (root / "afile").write_text("")
    assert (await run_tool("write_file", path="adir", content="x")).result.content == (
        "adir is a directory; give the path of a file"
    )
    done = await run_tool("write_file", path="afile/child.txt", content="x")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith("cannot write afile/child.txt: ")
    done = await run_tool("write_file", path="../escape.txt", content="x")
    assert done.is_error and not (tmp_path / "escape.txt").exists()


# ── edit_file ────────────────────────────────────────────────────────────────────


async def test_edit_file_replaces_exactly_one_match(run_tool: RunTool, root: Path) -> None:
    (root / "app.py").write_bytes(b"def f():\r\n    return 1\r\n\r\nprint(f())\r\n")
    done = await run_tool("edit_file", path="app.py", old="return 1", new="return 2")
    assert done.result.content == "edited app.py at line 2"
    # Line endings it did not touch are kept.
    assert (root / "app.py").read_bytes() == b"def f():\r\n    return 2\r\n\r\nprint(f())\r\n"


@pytest.mark.parametrize(
    ("text", "old", "count"),
    [("abc abc", "abc", 2), ("aaa", "aa", 2), ("abc", "xyz", 0), ("abc", "ABC", 0)],
)
async def test_edit_file_needs_exactly_one_match(
    run_tool: RunTool, root: Path, text: str, old: str, count: int
) -> None:
    (root / "f.txt").write_text(text)
    done = await run_tool("edit_file", path="f.txt", old=old, new="!")
    assert done.outcome is Outcome.ERROR
    assert done.result.content.startswith(
        f"old matches {count} times in f.txt, it must match exactly once; "
    )
    assert (root / "f.txt").read_text() == text


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("", "x", "old is empty"),
        ("same", "same", "old and new are the same"),
    ],
)
async def test_edit_file_refuses_empty_and_no_op_edits(
    run_tool: RunTool, root: Path, old: str, new: str, message: str
) -> None:
    (root / "f.txt").write_text("same")
    done = await run_tool("edit_file", path="f.txt", old=old, new=new)
    assert done.is_error and done.result.content.startswith(message)


async def test_edit_file_missing_and_binary(run_tool: RunTool, root: Path) -> None:
    done = await run_tool("edit_file", path="nope.txt", old="a", new="b")
    assert done.result.content == "no such file: nope.txt"
    (root / "b.bin").write_bytes(b"a\x00b")
    done = await run_tool("edit_file", path="b.bin", old="a", new="b")
    assert done.result.content == "b.bin looks like a binary file; edit_file edits text"


# ── list_dir ─────────────────────────────────────────────────────────────────────


async def test_list_dir(run_tool: RunTool, root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("")
    (root / "README.md").write_text("")
    (root / ".hidden").write_text("")
    (root / "link").symlink_to("src/main.py")
    assert (
        await run_tool("list_dir")
    ).result.content == ".hidden\nREADME.md\nlink -> src/main.py\nsrc/"
    assert (await run_tool("list_dir", path="src")).result.content == "main.py"


async def test_list_dir_refusals(run_tool: RunTool, root: Path) -> None:
    (root / "empty").mkdir()
    (root / "f").write_text("")
    assert (await run_tool("list_dir", path="empty")).result.content == "(empty is empty)"
    assert (await run_tool("list_dir", path="f")).result.content.startswith("f is a file")
    assert (await run_tool("list_dir", path="gone")).result.content == "no such directory: gone"
    assert (await run_tool("list_dir", path="..")).is_error


async def test_list_dir_is_bounded(run_tool: RunTool, root: Path) -> None:
    for i in range(1005):
        (root / f"f{i:04}").write_text("")
    content = (await run_tool("list_dir")).result.content
    assert content.splitlines()[-1] == "[... and 5 more entries]"
    assert len(content.splitlines()) == 1001

"""The file tools: read_file, write_file, edit_file, list_dir, on real files in a jail,
through the descriptor walk (`JailFS`)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from tiller import CancellationToken, Cancelled
from tiller.phase import Phase
from tiller.tools import (
    Capability,
    ExecContext,
    HardLinkRefused,
    Jail,
    Outcome,
    PathOutsideJail,
    Registry,
    SymlinkRefused,
    ToolError,
)
from tiller.tools._fs import JailFS
from tiller.tools.builtin import apply_patch, edit_file, glob, grep, list_dir, read_file, write_file

from .file_tools_support import FILE_TOOLS, RecordingSnapshots, run


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    return ctx.jail.root


def test_flags_of_the_file_tools() -> None:
    readers = [read_file, list_dir, glob, grep]
    writers = [write_file, edit_file, apply_patch]
    for each in readers:
        assert each.read_only and each.capabilities is Capability.PRIVATE_DATA
        assert not each.plan_scratchpad
    for each in writers:
        assert not each.read_only and each.denial_remedy and each.plan_scratchpad
    assert grep.name == "grep"
    # Plan shows the readers and the scratchpad writers; a registry sees the flag.
    visible = [s.name for s in Registry(FILE_TOOLS).specs_for(Phase.PLAN)]
    assert visible == [t.name for t in FILE_TOOLS]


# ── read_file ────────────────────────────────────────────────────────────────────


async def test_read_file_numbers_lines(ctx: ExecContext, root: Path) -> None:
    (root / "a.txt").write_text("alpha\nbeta\r\ngamma")
    done = await run(ctx, "read_file", path="a.txt")
    assert done.outcome is Outcome.OK
    assert done.result.content == "     1\talpha\n     2\tbeta\n     3\tgamma"


async def test_read_file_pages_with_offset_and_limit(ctx: ExecContext, root: Path) -> None:
    (root / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    done = await run(ctx, "read_file", path="n.txt", offset=3, limit=2)
    assert done.result.content == (
        "     4\tline 4\n     5\tline 5\n[lines 4-5 of 10; pass offset=5 to read on]"
    )
    done = await run(ctx, "read_file", path="n.txt", offset=8)
    assert done.result.content == "     9\tline 9\n    10\tline 10"
    done = await run(ctx, "read_file", path="n.txt", offset=10)
    assert done.result.content == "(n.txt has 10 lines; offset 10 is past the end)"


async def test_read_file_shows_2000_lines_by_default(ctx: ExecContext, root: Path) -> None:
    (root / "big.txt").write_text("x\n" * 2500)
    content = (await run(ctx, "read_file", path="big.txt")).result.content
    assert content.count("\tx") == 2000
    assert content.endswith("[lines 1-2000 of 2500; pass offset=2000 to read on]")


async def test_read_file_cuts_very_long_lines(ctx: ExecContext, root: Path) -> None:
    (root / "min.js").write_text("y" * 5000)
    content = (await run(ctx, "read_file", path="min.js")).result.content
    assert content == "     1\t" + "y" * 2000 + " [... line cut at 2000 chars]"


@pytest.mark.parametrize(
    ("setup", "path", "message"),
    [
        (None, "missing.txt", "no such file: missing.txt"),
        (None, "gone/missing.txt", "no such file: gone/missing.txt"),
        ("dir", "sub", "sub is a directory; use list_dir"),
        ("binary", "img.bin", "img.bin looks like a binary file (6 bytes)"),
        ("latin1", "old.txt", "old.txt is not UTF-8 text (byte 1: invalid"),
        ("fifo", "pipe", "cannot read pipe: not a regular file"),
        (None, "../outside.txt", "path '../outside.txt' is outside the workspace"),
    ],
)
async def test_read_file_refusals(
    ctx: ExecContext, root: Path, setup: str | None, path: str, message: str
) -> None:
    if setup == "dir":
        (root / "sub").mkdir()
    elif setup == "binary":
        (root / "img.bin").write_bytes(b"\x89PNG\x00\x01")
    elif setup == "latin1":
        (root / "old.txt").write_bytes("café".encode("latin-1")[2:] + b"\n")
    elif setup == "fifo":
        os.mkfifo(root / "pipe")  # opening it for reading would block: it is never opened
    done = await run(ctx, "read_file", path=path)
    assert done.outcome is Outcome.ERROR and done.is_error
    assert done.result.content.startswith(message), done.result.content


async def test_read_file_empty_file(ctx: ExecContext, root: Path) -> None:
    (root / "empty").write_text("")
    assert (await run(ctx, "read_file", path="empty")).result.content == "(empty is empty)"


async def test_read_file_stops_when_cancelled(root: Path) -> None:
    # Called directly (no registry, so no cancel scope): the sync tool checks the token
    # itself while it reads in its worker thread.
    (root / "big.txt").write_text("x\n" * 10_000)
    token = CancellationToken()
    token.cancel("stop")
    context = ExecContext.for_test(root, token=token)
    with pytest.raises(Cancelled, match="stop"):
        await read_file.call({"path": "big.txt"}, context)


async def test_read_file_through_symlinks(ctx: ExecContext, root: Path, tmp_path: Path) -> None:
    (root / "real.txt").write_text("inside\n")
    (root / "alias.txt").symlink_to(root / "real.txt")
    (root / "d").mkdir()
    (root / "d" / "f.txt").write_text("deep\n")
    (root / "dlink").symlink_to("d")
    (tmp_path / "secret.txt").write_text("outside\n")
    (root / "leak.txt").symlink_to(tmp_path / "secret.txt")
    assert (await run(ctx, "read_file", path="alias.txt")).result.content == "     1\tinside"
    assert (await run(ctx, "read_file", path="dlink/f.txt")).result.content == "     1\tdeep"
    done = await run(ctx, "read_file", path="leak.txt")
    assert done.is_error and "outside the workspace" in done.result.content
    done = await run(ctx, "read_file", path=str(tmp_path / "secret.txt"))
    assert done.is_error and "outside the workspace" in done.result.content


async def test_read_file_refuses_a_hard_linked_file(ctx: ExecContext, root: Path) -> None:
    (root / "one.txt").write_text("shared\n")
    os.link(root / "one.txt", root / "two.txt")
    done = await run(ctx, "read_file", path="one.txt")
    assert done.outcome is Outcome.ERROR
    assert "is a file with 2 hard links" in done.result.content
    assert "shared" not in done.result.content


# ── write_file ───────────────────────────────────────────────────────────────────


async def test_write_file_creates_parents_and_overwrites(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "write_file", path="deep/er/new.txt", content="héllo\n")
    assert done.result.content == "created deep/er/new.txt (7 bytes)"
    assert (root / "deep" / "er" / "new.txt").read_text() == "héllo\n"
    done = await run(ctx, "write_file", path="deep/er/new.txt", content="")
    assert done.result.content == "overwrote deep/er/new.txt (0 bytes)"
    assert (root / "deep" / "er" / "new.txt").read_text() == ""
    # Atomic replacement leaves no temporary files behind.
    assert sorted(p.name for p in (root / "deep" / "er").iterdir()) == ["new.txt"]


async def test_write_file_keeps_the_permission_bits(ctx: ExecContext, root: Path) -> None:
    script = root / "run.sh"
    script.write_text("echo old\n")
    script.chmod(0o750)
    inode = script.stat().st_ino
    await run(ctx, "write_file", path="run.sh", content="echo new\n")
    assert script.read_text() == "echo new\n"
    assert stat.S_IMODE(script.stat().st_mode) == 0o750
    assert script.stat().st_ino != inode  # replaced by a rename, not written in place


async def test_write_file_refusals(ctx: ExecContext, root: Path, tmp_path: Path) -> None:
    (root / "adir").mkdir()
    (root / "afile").write_text("")
    done = await run(ctx, "write_file", path="adir", content="x")
    assert done.result.content == "adir is a directory; give the path of a file"
    done = await run(ctx, "write_file", path="afile/child.txt", content="x")
    assert done.outcome is Outcome.ERROR
    assert done.result.content == "cannot write afile/child.txt: Not a directory"
    done = await run(ctx, "write_file", path="../escape.txt", content="x")
    assert done.is_error and not (tmp_path / "escape.txt").exists()
    done = await run(ctx, "write_file", path=".", content="x")
    assert done.is_error


async def test_write_file_refuses_text_that_is_not_unicode(ctx: ExecContext, root: Path) -> None:
    with pytest.raises(ToolError, match="not valid Unicode text"):
        await write_file.call({"path": "s.txt", "content": "a\udc80b"}, ctx)
    assert not (root / "s.txt").exists()


async def test_writes_snapshot_first_and_not_at_all_if_that_fails(root: Path) -> None:
    (root / "f.txt").write_text("one\n")
    snapshots = RecordingSnapshots()
    ctx = ExecContext.for_test(root, snapshots=snapshots)
    await write_file.call({"path": "f.txt", "content": "two\n"}, ctx)
    await edit_file.call({"path": "f.txt", "old": "two", "new": "three"}, ctx)
    await write_file.call({"path": "new.txt", "content": "x"}, ctx)
    target, new = root / "f.txt", root / "new.txt"
    assert [(paths, held) for paths, held, _ in snapshots.calls] == [
        ([target], {target: b"one\n"}),
        ([target], {target: b"two\n"}),
        ([new], {new: None}),
    ]
    # A failed edit takes no snapshot: nothing was going to change.
    with pytest.raises(ToolError, match="old matches 0 times"):
        await edit_file.call({"path": "f.txt", "old": "nope", "new": "x"}, ctx)
    assert len(snapshots.calls) == 3

    failing = ExecContext.for_test(root, snapshots=RecordingSnapshots(fail=True))
    for tool, args in [
        (write_file, {"path": "f.txt", "content": "lost"}),
        (edit_file, {"path": "f.txt", "old": "three", "new": "lost"}),
    ]:
        with pytest.raises(RuntimeError, match="store is down"):
            await tool.call(args, failing)
    assert target.read_text() == "three\n"


async def test_planning_writes_only_to_the_scratchpad(root: Path) -> None:
    pad = root / ".tiller" / "scratch"
    pad.mkdir(parents=True)
    (root / "app.py").write_text("x = 1\n")
    ctx = ExecContext.for_test(root, phase=Phase.PLAN, scratchpad=pad)
    done = await run(ctx, "write_file", path=".tiller/scratch/plan.md", content="# plan\n")
    assert done.outcome is Outcome.OK
    assert (pad / "plan.md").read_text() == "# plan\n"
    for name, args in [
        ("write_file", {"path": "app.py", "content": "x = 2\n"}),
        ("edit_file", {"path": "app.py", "old": "1", "new": "2"}),
    ]:
        done = await run(ctx, name, **args)
        assert done.outcome is Outcome.ERROR
        assert "is a write outside the scratchpad .tiller/scratch/ while planning" in (
            done.result.content
        )
    assert (root / "app.py").read_text() == "x = 1\n"


# ── edit_file ────────────────────────────────────────────────────────────────────


async def test_edit_file_replaces_exactly_one_match(ctx: ExecContext, root: Path) -> None:
    (root / "app.py").write_bytes(b"def f():\r\n    return 1\r\n\r\nprint(f())\r\n")
    done = await run(ctx, "edit_file", path="app.py", old="return 1", new="return 2")
    assert done.result.content == "edited app.py at line 2"
    # Line endings it did not touch are kept.
    assert (root / "app.py").read_bytes() == b"def f():\r\n    return 2\r\n\r\nprint(f())\r\n"


@pytest.mark.parametrize(
    ("text", "old", "count"),
    [("abc abc", "abc", 2), ("aaa", "aa", 2), ("abc", "xyz", 0), ("abc", "ABC", 0)],
)
async def test_edit_file_needs_exactly_one_match(
    ctx: ExecContext, root: Path, text: str, old: str, count: int
) -> None:
    (root / "f.txt").write_text(text)
    done = await run(ctx, "edit_file", path="f.txt", old=old, new="!")
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
    ctx: ExecContext, root: Path, old: str, new: str, message: str
) -> None:
    (root / "f.txt").write_text("same")
    done = await run(ctx, "edit_file", path="f.txt", old=old, new=new)
    assert done.is_error and done.result.content.startswith(message)


async def test_edit_file_missing_binary_and_directory(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "edit_file", path="nope.txt", old="a", new="b")
    assert done.result.content == "no such file: nope.txt"
    (root / "b.bin").write_bytes(b"a\x00b")
    done = await run(ctx, "edit_file", path="b.bin", old="a", new="b")
    assert done.result.content == "b.bin looks like a binary file; edit_file edits text"
    (root / "d").mkdir()
    done = await run(ctx, "edit_file", path="d", old="a", new="b")
    assert done.result.content == "d is a directory; edit_file edits a file"


# ── list_dir ─────────────────────────────────────────────────────────────────────


async def test_list_dir(ctx: ExecContext, root: Path) -> None:
    (root / "src").mkdir()
    (root / "src" / "main.py").write_text("")
    (root / "README.md").write_text("")
    (root / ".hidden").write_text("")
    (root / "link").symlink_to("src/main.py")
    assert (
        await run(ctx, "list_dir")
    ).result.content == ".hidden\nREADME.md\nlink -> src/main.py\nsrc/"
    assert (await run(ctx, "list_dir", path="src")).result.content == "main.py"


async def test_list_dir_escapes_unprintable_names(ctx: ExecContext, root: Path) -> None:
    (root / "bell\x07.txt").write_text("")
    os.close(os.open(os.path.join(os.fsencode(root), b"raw\xff"), os.O_CREAT | os.O_WRONLY))
    assert (await run(ctx, "list_dir")).result.content == "bell\\x07.txt\nraw\\xff"


async def test_list_dir_refusals(ctx: ExecContext, root: Path) -> None:
    (root / "empty").mkdir()
    (root / "f").write_text("")
    assert (await run(ctx, "list_dir", path="empty")).result.content == "(empty is empty)"
    assert (await run(ctx, "list_dir", path="f")).result.content.startswith("f is a file")
    assert (await run(ctx, "list_dir", path="gone")).result.content == "no such directory: gone"
    assert (await run(ctx, "list_dir", path="..")).is_error


async def test_list_dir_is_bounded(ctx: ExecContext, root: Path) -> None:
    for i in range(1005):
        (root / f"f{i:04}").write_text("")
    content = (await run(ctx, "list_dir")).result.content
    assert content.splitlines()[-1] == "[... and 5 more entries]"
    assert len(content.splitlines()) == 1001


# ── JailFS, directly ─────────────────────────────────────────────────────────────


def test_jail_fs_operations(tmp_path: Path) -> None:
    tools = Jail(tmp_path)
    fs = tools.fs
    assert isinstance(fs, JailFS) and fs.root == tools.root
    fs.mkdirs(tools.resolve("a/b/c"))
    assert (tmp_path / "a" / "b" / "c").is_dir()
    assert fs.write_bytes(tools.resolve("a/b/f.txt"), b"data") is False
    assert fs.write_bytes(tools.resolve("a/b/f.txt"), b"more") is True
    assert fs.read_bytes(tools.resolve("a/b/f.txt")) == b"more"
    st = fs.stat(tools.resolve("a/b/f.txt"))
    assert st is not None and stat.S_ISREG(st.st_mode) and st.st_size == 4
    assert fs.stat(tools.resolve("a/missing")) is None
    assert fs.stat(tools.resolve("a/b/f.txt/under")) is None  # a file is no directory
    root_stat = fs.stat(tools.root)
    assert root_stat is not None and stat.S_ISDIR(root_stat.st_mode)
    assert [(e.name, e.kind) for e in fs.listdir(tools.resolve("a/b"))] == [
        ("c", "dir"),
        ("f.txt", "file"),
    ]
    with pytest.raises(IsADirectoryError):
        fs.unlink(tools.resolve("a/b/c"))
    fs.unlink(tools.resolve("a/b/f.txt"))
    assert not (tmp_path / "a" / "b" / "f.txt").exists()
    with pytest.raises(PathOutsideJail):
        fs.read_bytes(tmp_path.parent)  # not under the root at all
    with pytest.raises(PathOutsideJail, match="not a resolved path"):
        fs.read_bytes(tools.root / "a" / ".." / ".." / "x")


def test_jail_fs_refuses_what_resolve_would_have_followed(tmp_path: Path) -> None:
    # Given an unresolved path with a symlink in it (what a swap produces), every
    # operation refuses instead of following the link.
    root = tmp_path / "ws"
    (root / "real").mkdir(parents=True)
    (root / "real" / "f.txt").write_text("x")
    (root / "link").symlink_to("real")
    (root / "flink").symlink_to("real/f.txt")
    fs = Jail(root).fs
    real_root = root.resolve()
    with pytest.raises(SymlinkRefused, match="'link' became a symlink"):
        fs.read_bytes(real_root / "link" / "f.txt")
    with pytest.raises(SymlinkRefused):
        fs.write_bytes(real_root / "link" / "g.txt", b"y")
    with pytest.raises(SymlinkRefused):
        fs.listdir(real_root / "link")
    for operation in (fs.read_bytes, fs.stat, fs.unlink):
        with pytest.raises(SymlinkRefused):
            operation(real_root / "flink")
    with pytest.raises(SymlinkRefused):
        fs.write_bytes(real_root / "flink", b"y")
    assert (root / "real" / "f.txt").read_text() == "x"
    assert not (root / "real" / "g.txt").exists()


def test_hard_links_are_refused_for_writes_too(tmp_path: Path) -> None:
    (tmp_path / "a").write_text("a")
    os.link(tmp_path / "a", tmp_path / "b")
    tools = Jail(tmp_path)
    with pytest.raises(HardLinkRefused) as caught:
        tools.fs.write_bytes(tools.resolve("a"), b"changed")
    assert caught.value.links == 2
    assert (tmp_path / "b").read_text() == "a"


def test_the_coding_tools() -> None:
    from tiller.tools.builtin import coding_tools

    names = [t.name for t in coding_tools()]
    assert names == [
        "read_file",
        "list_dir",
        "glob",
        "grep",
        "task_create",
        "task_update",
        "task_list",
        "ask_user",
        "write_file",
        "edit_file",
        "apply_patch",
        "execute_command",
        "background_process",
    ]
    assert [t.name for t in coding_tools(web=True)] == [*names, "web_fetch"]
    # The web sends data off the machine: never read-only, so it reaches the approver.
    assert not coding_tools(web=True)[-1].read_only
    assert coding_tools() is not coding_tools()

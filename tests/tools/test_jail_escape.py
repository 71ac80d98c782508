"""The jail-escape corpus: every way out we know of, tried against the file tools.

Each case builds a fresh world (a jail `ws/` and, beside it, a sentinel directory
`outside/` holding a secret), runs one file tool directly (`await tool.call(args, ctx)`)
and asserts two things: the tool refused with the jail's *typed* error (the exact class,
and the words a model would read), and nothing outside the jail changed, byte for byte,
link for link, mode for mode. Race cases swap a symlink in right after `resolve()` has
checked the path, deterministically, by wrapping `Jail.resolve`: the descriptor walk
must refuse. A few allowed cases at the end prove the jail is not simply refusing all.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tiller.tools import (
    ExecContext,
    HardLinkRefused,
    InvalidPath,
    Jail,
    PathOutsideJail,
    PathTooLong,
    SymlinkRefused,
    Tool,
    ToolError,
)
from tiller.tools.builtin import apply_patch, edit_file, glob, grep, list_dir, read_file, write_file

from .file_tools_support import fingerprint

SECRET = "TOP SECRET\n"

TOOLS: dict[str, Tool] = {
    t.name: t for t in (read_file, write_file, edit_file, list_dir, apply_patch, glob, grep)
}


@dataclass(frozen=True)
class World:
    """The jail and what lies beside it."""

    tmp: Path
    root: Path
    outside: Path
    monkeypatch: pytest.MonkeyPatch


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> World:
    root = tmp_path / "ws"
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "inner.txt").write_text("inner\n")
    (root / "file.txt").write_text("inside\n")
    outside = tmp_path / "outside"
    (outside / "dir").mkdir(parents=True)
    (outside / "secret.txt").write_text(SECRET)
    (outside / "dir" / "inner.txt").write_text(SECRET)
    (outside / "script.sh").write_text("#!/bin/sh\n")
    (outside / "script.sh").chmod(0o755)
    return World(tmp_path, root.resolve(), outside.resolve(), monkeypatch)


def beside_the_jail(world: World) -> dict[str, Any]:
    """Everything under tmp_path except the jail itself."""
    return {
        key: value
        for key, value in fingerprint(world.tmp).items()
        if key != "ws" and not key.startswith("ws/")
    }


# ── how cases set the world up ───────────────────────────────────────────────────

Setup = Callable[[World], None]
Args = Callable[[World], dict[str, Any]]


def link(name: str, target: Callable[[World], str | Path]) -> Setup:
    def setup(w: World) -> None:
        path = w.root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.symlink_to(target(w))

    return setup


def links(*setups: Setup) -> Setup:
    def setup(w: World) -> None:
        for each in setups:
            each(w)

    return setup


def hard_link(name: str) -> Setup:
    def setup(w: World) -> None:
        os.link(w.outside / "secret.txt", w.root / name)

    return setup


def chdir(where: Callable[[World], Path]) -> Setup:
    def setup(w: World) -> None:
        w.monkeypatch.chdir(where(w))

    return setup


def swap_after_check(component: str, target: Callable[[World], Path]) -> Setup:
    """Right after the first `resolve()` has checked a path (and found it inside), move
    `component` away and put a symlink to `target` in its place: the race a concurrent
    process would win between a tool's check and its open."""

    def setup(w: World) -> None:
        original = Jail.resolve
        swapped = False

        def resolve(self: Jail, path: str | os.PathLike[str]) -> Path:
            nonlocal swapped
            result = original(self, path)
            if not swapped:
                swapped = True
                victim = w.root / component
                victim.rename(w.root / f"{component}.moved")
                victim.symlink_to(target(w))
            return result

        w.monkeypatch.setattr(Jail, "resolve", resolve)

    return setup


def fixed(**args: Any) -> Args:
    return lambda w: args


def modify_patch(path: str, old: str = "TOP SECRET", new: str = "pwned") -> str:
    return f"--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def create_patch(path: str) -> str:
    return f"--- /dev/null\n+++ b/{path}\n@@ -0,0 +1 @@\n+pwned\n"


@dataclass(frozen=True)
class Escape:
    id: str
    tool: str
    args: Args
    error: type[PathOutsideJail]
    says: str
    setup: Setup | None = None
    marks: tuple[Any, ...] = field(default=())


OUTSIDE: Callable[[World], Path] = lambda w: w.outside  # noqa: E731
SECRET_FILE: Callable[[World], Path] = lambda w: w.outside / "secret.txt"  # noqa: E731
OUT = "is outside the workspace"
LOOP = "cannot be resolved"

CASES = [
    # ── `..` and absolute paths ──
    Escape("dotdot-read", "read_file", fixed(path="../outside/secret.txt"), PathOutsideJail, OUT),
    Escape(
        "dotdot-deep-read",
        "read_file",
        fixed(path="sub/../../outside/secret.txt"),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "dotdot-dots-read",
        "read_file",
        fixed(path="./sub/./../../outside/./secret.txt"),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "dotdot-climb-and-return-write",
        "write_file",
        lambda w: {"path": f"sub/../../../{w.tmp.name}/outside/new.txt", "content": "x"},
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "dotdot-write", "write_file", fixed(path="../escape.txt", content="x"), PathOutsideJail, OUT
    ),
    Escape(
        "dotdot-edit",
        "edit_file",
        fixed(path="../outside/secret.txt", old="TOP", new="x"),
        PathOutsideJail,
        OUT,
    ),
    Escape("dotdot-list", "list_dir", fixed(path=".."), PathOutsideJail, OUT),
    Escape(
        "absolute-read",
        "read_file",
        lambda w: {"path": str(w.outside / "secret.txt")},
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "absolute-write",
        "write_file",
        lambda w: {"path": str(w.outside / "new.txt"), "content": "x"},
        PathOutsideJail,
        OUT,
    ),
    Escape("etc-passwd", "read_file", fixed(path="/etc/passwd"), PathOutsideJail, OUT),
    Escape(
        "etc-passwd-by-dotdot",
        "read_file",
        fixed(path="../" * 40 + "etc/passwd"),
        PathOutsideJail,
        OUT,
    ),
    # ── symlinks ──
    Escape(
        "symlink-file-read",
        "read_file",
        fixed(path="leak"),
        PathOutsideJail,
        OUT,
        link("leak", SECRET_FILE),
    ),
    Escape(
        "symlink-file-write",
        "write_file",
        fixed(path="leak", content="pwned"),
        PathOutsideJail,
        OUT,
        link("leak", SECRET_FILE),
    ),
    Escape(
        "symlink-file-edit",
        "edit_file",
        fixed(path="leak", old="TOP", new="x"),
        PathOutsideJail,
        OUT,
        link("leak", SECRET_FILE),
    ),
    Escape(
        "symlink-dir-list",
        "list_dir",
        fixed(path="outdir"),
        PathOutsideJail,
        OUT,
        link("outdir", OUTSIDE),
    ),
    Escape(
        "symlink-dir-read-through",
        "read_file",
        fixed(path="outdir/secret.txt"),
        PathOutsideJail,
        OUT,
        link("outdir", OUTSIDE),
    ),
    Escape(
        "symlink-parent-dir-write",
        "write_file",
        fixed(path="outdir/new.txt", content="pwned"),
        PathOutsideJail,
        OUT,
        link("outdir", OUTSIDE),
    ),
    Escape(
        "symlink-in-a-nested-parent-write",
        "write_file",
        fixed(path="sub/up/dir/inner.txt", content="pwned"),
        PathOutsideJail,
        OUT,
        link("sub/up", lambda w: "../../outside"),
    ),
    Escape(
        "symlink-to-filesystem-root",
        "read_file",
        fixed(path="slash/etc/passwd"),
        PathOutsideJail,
        OUT,
        link("slash", lambda w: "/"),
    ),
    Escape(
        "symlink-chain-read",
        "read_file",
        fixed(path="c1"),
        PathOutsideJail,
        OUT,
        links(
            link("c1", lambda w: "c2"), link("c2", lambda w: "sub/c3"), link("sub/c3", SECRET_FILE)
        ),
    ),
    Escape(
        "symlink-chain-write",
        "write_file",
        fixed(path="c1", content="pwned"),
        PathOutsideJail,
        OUT,
        links(
            link("c1", lambda w: "c2"), link("c2", lambda w: "sub/c3"), link("sub/c3", SECRET_FILE)
        ),
    ),
    Escape(
        "symlink-loop-read",
        "read_file",
        fixed(path="loop1"),
        PathOutsideJail,
        LOOP,
        links(link("loop1", lambda w: "loop2"), link("loop2", lambda w: "loop1")),
    ),
    Escape(
        "symlink-loop-write-under",
        "write_file",
        fixed(path="loop1/x.txt", content="x"),
        PathOutsideJail,
        LOOP,
        links(link("loop1", lambda w: "loop2"), link("loop2", lambda w: "loop1")),
    ),
    Escape(
        "symlink-self-loop",
        "edit_file",
        fixed(path="me", old="a", new="b"),
        PathOutsideJail,
        LOOP,
        link("me", lambda w: "me"),
    ),
    Escape(
        "dangling-symlink-out-write",
        "write_file",
        fixed(path="dangle", content="pwned"),
        PathOutsideJail,
        OUT,
        link("dangle", lambda w: w.outside / "created.txt"),
    ),
    # ── /proc ──
    Escape(
        "proc-self-root-read",
        "read_file",
        lambda w: {"path": f"/proc/self/root{w.outside}/secret.txt"},
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "proc-self-root-etc",
        "read_file",
        fixed(path="/proc/self/root/etc/passwd"),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "proc-self-root-write",
        "write_file",
        lambda w: {"path": f"/proc/self/root{w.outside}/new.txt", "content": "x"},
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "proc-self-cwd-dotdot",
        "read_file",
        fixed(path="/proc/self/cwd/../outside/secret.txt"),
        PathOutsideJail,
        OUT,
        chdir(lambda w: w.root),
    ),
    Escape(
        "proc-self-cwd-write",
        "write_file",
        fixed(path="/proc/self/cwd/secret.txt", content="pwned"),
        PathOutsideJail,
        OUT,
        chdir(lambda w: w.outside),
    ),
    Escape("proc-self-fd", "list_dir", fixed(path="/proc/self/fd"), PathOutsideJail, OUT),
    # ── names no tool opens ──
    Escape(
        "nul-byte-read",
        "read_file",
        fixed(path="file.txt\x00../../outside/secret.txt"),
        InvalidPath,
        "contains a NUL byte",
    ),
    Escape("nul-byte-write", "write_file", fixed(path="a\x00b", content="x"), InvalidPath, "NUL"),
    Escape(
        "newline-in-name",
        "write_file",
        fixed(path="evil\nname", content="x"),
        InvalidPath,
        "contains the control character U+000A",
    ),
    Escape(
        "terminal-escape-in-name",
        "read_file",
        fixed(path="\x1b[31mred"),
        InvalidPath,
        "control character U+001B",
    ),
    Escape(
        "not-utf8-name",
        "write_file",
        fixed(path="bad\udcffname", content="x"),
        InvalidPath,
        "is not valid UTF-8 text",
    ),
    Escape(
        "name-of-300-bytes",
        "write_file",
        fixed(path="x" * 300, content="x"),
        PathTooLong,
        "has a name of 300 bytes, over the 255-byte limit",
    ),
    Escape(
        "name-of-300-bytes-in-150-chars",
        "read_file",
        fixed(path="sub/" + "é" * 150),
        PathTooLong,
        "has a name of 300 bytes",
    ),
    Escape(
        "path-over-4096-bytes",
        "write_file",
        fixed(path="/".join(["d" * 200] * 25), content="x"),
        PathTooLong,
        "is 5024 bytes long, over the 4096-byte limit",
    ),
    # ── hard links ──
    Escape(
        "hard-link-read",
        "read_file",
        fixed(path="hl"),
        HardLinkRefused,
        "is a file with 2 hard links",
        hard_link("hl"),
    ),
    Escape(
        "hard-link-write",
        "write_file",
        fixed(path="hl", content="pwned"),
        HardLinkRefused,
        "hard links",
        hard_link("hl"),
    ),
    Escape(
        "hard-link-edit",
        "edit_file",
        fixed(path="hl", old="TOP", new="x"),
        HardLinkRefused,
        "hard links",
        hard_link("hl"),
    ),
    Escape(
        "hard-link-patch",
        "apply_patch",
        fixed(patch=modify_patch("hl")),
        HardLinkRefused,
        "hard links",
        hard_link("hl"),
    ),
    # ── apply_patch ──
    Escape(
        "patch-dotdot-modify",
        "apply_patch",
        fixed(patch=modify_patch("../outside/secret.txt")),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "patch-dotdot-create",
        "apply_patch",
        fixed(patch=create_patch("../outside/new.txt")),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "patch-dotdot-delete",
        "apply_patch",
        fixed(patch="--- a/../outside/secret.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-TOP SECRET\n"),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "patch-absolute-path",
        "apply_patch",
        lambda w: {"patch": modify_patch(str(w.outside / "secret.txt")).replace("a//", "/")},
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "patch-through-symlinked-dir",
        "apply_patch",
        fixed(patch=create_patch("outdir/new.txt")),
        PathOutsideJail,
        OUT,
        link("outdir", OUTSIDE),
    ),
    Escape(
        "patch-through-dangling-symlink",
        "apply_patch",
        fixed(patch=create_patch("dangle")),
        PathOutsideJail,
        OUT,
        link("dangle", lambda w: w.outside / "created.txt"),
    ),
    Escape(
        "patch-rename-out",
        "apply_patch",
        fixed(
            patch="diff --git a/file.txt b/../outside/moved.txt\n"
            "rename from file.txt\nrename to ../outside/moved.txt\n"
        ),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "patch-second-file-escapes",
        "apply_patch",
        fixed(patch=modify_patch("file.txt", "inside", "changed") + create_patch("../evil.txt")),
        PathOutsideJail,
        OUT,
    ),
    # ── glob and grep ──
    Escape("glob-path-dotdot", "glob", fixed(pattern="*", path=".."), PathOutsideJail, OUT),
    Escape(
        "glob-pattern-dotdot",
        "glob",
        fixed(pattern="../outside/*"),
        PathOutsideJail,
        "'..' segment",
    ),
    Escape(
        "glob-absolute-pattern",
        "glob",
        lambda w: {"pattern": f"{w.outside}/*"},
        PathOutsideJail,
        "is absolute",
    ),
    Escape(
        "glob-symlinked-dir",
        "glob",
        fixed(pattern="*", path="outdir"),
        PathOutsideJail,
        OUT,
        link("outdir", OUTSIDE),
    ),
    Escape(
        "grep-path-outside",
        "grep",
        fixed(pattern="SECRET", path="../outside"),
        PathOutsideJail,
        OUT,
    ),
    Escape(
        "grep-symlinked-file",
        "grep",
        fixed(pattern="SECRET", path="leak"),
        PathOutsideJail,
        OUT,
        link("leak", SECRET_FILE),
    ),
    Escape(
        "grep-glob-dotdot",
        "grep",
        fixed(pattern="SECRET", glob="../outside/*"),
        PathOutsideJail,
        "'..' segment",
    ),
    # ── a symlink swapped in between the check and the open ──
    Escape(
        "race-parent-dir-write",
        "write_file",
        fixed(path="sub/new.txt", content="pwned"),
        SymlinkRefused,
        "'sub' became a symlink",
        swap_after_check("sub", OUTSIDE),
    ),
    Escape(
        "race-parent-dir-read",
        "read_file",
        fixed(path="sub/inner.txt"),
        SymlinkRefused,
        "'sub' became a symlink",
        swap_after_check("sub", lambda w: w.outside / "dir"),
    ),
    Escape(
        "race-parent-dir-edit",
        "edit_file",
        fixed(path="sub/inner.txt", old="TOP SECRET", new="pwned"),
        SymlinkRefused,
        "became a symlink",
        swap_after_check("sub", lambda w: w.outside / "dir"),
    ),
    Escape(
        "race-parent-dir-list",
        "list_dir",
        fixed(path="sub"),
        SymlinkRefused,
        "became a symlink",
        swap_after_check("sub", OUTSIDE),
    ),
    Escape(
        "race-file-read",
        "read_file",
        fixed(path="file.txt"),
        SymlinkRefused,
        "'file.txt' became a symlink",
        swap_after_check("file.txt", SECRET_FILE),
    ),
    Escape(
        "race-file-write",
        "write_file",
        fixed(path="file.txt", content="pwned"),
        SymlinkRefused,
        "'file.txt' became a symlink",
        swap_after_check("file.txt", SECRET_FILE),
    ),
    Escape(
        "race-patch",
        "apply_patch",
        fixed(patch=modify_patch("sub/inner.txt")),
        SymlinkRefused,
        "'sub' became a symlink",
        swap_after_check("sub", lambda w: w.outside / "dir"),
    ),
    Escape(
        "race-grep",
        "grep",
        fixed(pattern="SECRET", path="sub"),
        SymlinkRefused,
        "'sub' became a symlink",
        swap_after_check("sub", lambda w: w.outside / "dir"),
    ),
]


def test_the_corpus_is_large_and_its_ids_unique() -> None:
    assert len(CASES) >= 30
    assert len({case.id for case in CASES}) == len(CASES)
    assert {case.tool for case in CASES} == set(TOOLS)


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in CASES])
async def test_escape_is_refused_and_nothing_outside_changes(world: World, case: Escape) -> None:
    if case.setup is not None:
        case.setup(world)
    before = beside_the_jail(world)
    ctx = ExecContext.for_test(world.root)
    with pytest.raises(PathOutsideJail) as caught:
        await TOOLS[case.tool].call(case.args(world), ctx)
    assert type(caught.value) is case.error, caught.value
    message = str(caught.value)
    assert case.says in message, message
    assert "TOP SECRET" not in message
    assert beside_the_jail(world) == before


async def test_the_registry_reports_a_refusal_as_an_error_result(world: World) -> None:
    from tiller.tools import Outcome

    from .file_tools_support import run

    (world.root / "hl").hardlink_to(world.outside / "secret.txt")
    done = await run(ExecContext.for_test(world.root), "read_file", path="hl")
    assert done.outcome is Outcome.ERROR
    assert "is a file with 2 hard links" in done.result.content
    assert SECRET.strip() not in done.result.content


# ── odd Unicode: literal names, inside the jail ──────────────────────────────────


@pytest.mark.parametrize(
    "name",
    [
        "\uff0e\uff0e\uff0foutside\uff0fsecret.txt",  # fullwidth dots and solidus: one name
        "\u202etxt.exe",  # right-to-left override
        ".\u0307./secret.txt",  # a dot, a combining dot above, a dot: not `..`
        "\u2024\u2024/secret.txt",  # one-dot leaders
        "..\u200b/secret.txt",  # `..` with a zero-width space: not `..`
        "..\\outside\\secret.txt",  # backslashes are not separators here
    ],
)
async def test_odd_unicode_names_are_literal_and_stay_inside(world: World, name: str) -> None:
    before = beside_the_jail(world)
    ctx = ExecContext.for_test(world.root)
    with pytest.raises(ToolError, match="no such file"):
        await read_file.call({"path": name}, ctx)
    await write_file.call({"path": name, "content": "literal\n"}, ctx)
    assert (world.root / name).read_text() == "literal\n"
    assert (world.root / name).resolve().is_relative_to(world.root)
    read = await read_file.call({"path": name}, ctx)
    assert read.content == "     1\tliteral"
    found = await glob.call({"pattern": "**/*"}, ctx)
    assert name in found.content.splitlines()
    assert beside_the_jail(world) == before


# ── allowed: the jail does not refuse everything ─────────────────────────────────


async def test_symlinks_inside_the_jail_work(world: World) -> None:
    root = world.root
    (root / "alias.txt").symlink_to("file.txt")
    (root / "dlink").symlink_to("sub")
    (root / "abs-alias").symlink_to(root / "sub" / "inner.txt")
    ctx = ExecContext.for_test(root)
    before = beside_the_jail(world)
    assert (await read_file.call({"path": "alias.txt"}, ctx)).content == "     1\tinside"
    assert (await read_file.call({"path": "abs-alias"}, ctx)).content == "     1\tinner"
    await write_file.call({"path": "alias.txt", "content": "via link\n"}, ctx)
    assert (root / "file.txt").read_text() == "via link\n"
    assert (root / "alias.txt").is_symlink()  # the link itself is kept
    await write_file.call({"path": "dlink/new.txt", "content": "new\n"}, ctx)
    assert (root / "sub" / "new.txt").read_text() == "new\n"
    await edit_file.call({"path": "dlink/inner.txt", "old": "inner", "new": "edited"}, ctx)
    assert (root / "sub" / "inner.txt").read_text() == "edited\n"
    listing = await list_dir.call({"path": "dlink"}, ctx)
    assert listing.content == "inner.txt\nnew.txt"
    patch = "--- a/alias.txt\n+++ b/alias.txt\n@@ -1 +1 @@\n-via link\n+patched\n"
    await apply_patch.call({"patch": patch}, ctx)
    assert (root / "file.txt").read_text() == "patched\n"
    assert beside_the_jail(world) == before


async def test_in_jail_spellings_of_inside_paths_work(world: World) -> None:
    root = world.root
    ctx = ExecContext.for_test(root)
    for path in [
        "sub/../file.txt",
        str(root / "file.txt"),
        f"/proc/self/root{root}/file.txt",  # resolves inside: allowed
        "./sub/.././file.txt",
    ]:
        assert (await read_file.call({"path": path}, ctx)).content == "     1\tinside"
    name = "n" * 255  # NAME_MAX exactly is fine
    await write_file.call({"path": name, "content": "x"}, ctx)
    assert (root / name).read_text() == "x"

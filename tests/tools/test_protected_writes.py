"""The file tools never write protected policy (law 11): `tiller.toml`, `.tiller/`, git's
config and hooks, and the run's hook scripts, in every safety mode (the tool contexts here
run in `full_access`), whatever the spelling of the path."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tiller.phase import Phase
from tiller.tools import ExecContext, Execution, Jail, Outcome, ProtectedPathRefused, SafetyMode
from tiller.tools._fs import JailFS

from .file_tools_support import fingerprint, run

POLICY = '[policy]\nmode = "ask"\n'


@pytest.fixture
def ctx(tmp_path: Path) -> ExecContext:
    root = tmp_path / "ws"
    root.mkdir()
    return ExecContext.for_test(root, jail=Jail(root, safety=SafetyMode.FULL_ACCESS))


@pytest.fixture
def root(ctx: ExecContext) -> Path:
    root = ctx.jail.root
    (root / "tiller.toml").write_text(POLICY)
    (root / "sub").mkdir()
    (root / ".git" / "hooks").mkdir(parents=True)
    (root / ".git" / "config").write_text("[core]\n")
    (root / "notes.txt").write_text("notes\n")
    return root


def _refused(done: Execution, covering: str) -> None:
    content = done.result.content
    assert done.outcome is Outcome.ERROR, content
    assert "is protected policy" in content
    assert f"covered by {covering!r}" in content
    assert "a person edits it between runs" in content


@pytest.mark.parametrize(
    ("path", "covering"),
    [
        ("tiller.toml", "tiller.toml"),
        ("./tiller.toml", "tiller.toml"),
        ("sub/../tiller.toml", "tiller.toml"),
        ("TILLER.TOML", "tiller.toml"),  # case-insensitive filesystems: the same file
        (".tiller/taint.json", ".tiller"),
        (".git/config", ".git/config"),
        (".git//hooks/pre-commit", ".git/hooks"),
        (".GIT/config", ".git/config"),
        (".git/config.worktree", ".git/config.worktree"),
        (".git/modules/x/config", ".git/modules"),
        (".git/commondir", ".git/commondir"),
        ("vendor/lib/.git", "vendor/lib/.git"),  # a gitdir: file sending git elsewhere
        ("vendor/lib/.git/config", "vendor/lib/.git"),
        ("sub/.GIT/hooks/pre-commit", "sub/.GIT"),
    ],
)
async def test_write_file_refuses_every_spelling_of_a_protected_path(
    ctx: ExecContext, root: Path, path: str, covering: str
) -> None:
    assert ctx.jail.safety.mode is SafetyMode.FULL_ACCESS
    before = fingerprint(root)
    done = await run(ctx, "write_file", path=path, content='[policy]\nmode = "full_access"\n')
    _refused(done, covering)
    assert fingerprint(root) == before


async def test_a_symlinked_directory_into_git_is_refused(ctx: ExecContext, root: Path) -> None:
    (root / "tools").symlink_to(".git")
    done = await run(ctx, "write_file", path="tools/hooks/pre-commit", content="id\n")
    _refused(done, ".git/hooks")
    assert not (root / ".git" / "hooks" / "pre-commit").exists()


async def test_edit_file_refuses_the_policy_file(ctx: ExecContext, root: Path) -> None:
    done = await run(ctx, "edit_file", path="tiller.toml", old='"ask"', new='"full_access"')
    _refused(done, "tiller.toml")
    assert (root / "tiller.toml").read_text() == POLICY


async def test_a_symlink_to_the_policy_file_is_refused(ctx: ExecContext, root: Path) -> None:
    (root / "innocent.toml").symlink_to("tiller.toml")
    done = await run(ctx, "write_file", path="innocent.toml", content="[hooks]\n")
    _refused(done, "tiller.toml")
    assert (root / "tiller.toml").read_text() == POLICY


async def test_a_hard_link_to_the_policy_file_cannot_change_it(
    ctx: ExecContext, root: Path
) -> None:
    # A hard-linked file is refused outright (and a write would replace the name by
    # rename, never write through the link): the policy file keeps its content.
    os.link(root / "tiller.toml", root / "copy.toml")
    done = await run(ctx, "write_file", path="copy.toml", content="[hooks]\n")
    assert done.outcome is Outcome.ERROR, done.result.content
    assert "link" in done.result.content
    assert (root / "tiller.toml").read_text() == POLICY


PATCH_ONTO_POLICY = """\
diff --git a/notes.txt b/tiller.toml
similarity index 100%
rename from notes.txt
rename to tiller.toml
"""

PATCH_POLICY_AWAY = """\
--- a/tiller.toml
+++ /dev/null
@@ -1,2 +0,0 @@
-[policy]
-mode = "ask"
"""

PATCH_NEW_HOOK = """\
--- a/notes.txt
+++ b/notes.txt
@@ -1 +1 @@
-notes
+more notes
--- /dev/null
+++ b/.git/hooks/pre-commit
@@ -0,0 +1,2 @@
+#!/bin/sh
+touch /tmp/owned
"""


@pytest.mark.parametrize(
    ("patch", "covering"),
    [
        (PATCH_ONTO_POLICY, "tiller.toml"),
        (PATCH_POLICY_AWAY, "tiller.toml"),
        (PATCH_NEW_HOOK, ".git/hooks"),
    ],
    ids=["rename-onto", "delete", "new-git-hook"],
)
async def test_apply_patch_refuses_protected_targets_and_writes_nothing(
    ctx: ExecContext, root: Path, patch: str, covering: str
) -> None:
    before = fingerprint(root)
    done = await run(ctx, "apply_patch", patch=patch)
    _refused(done, covering)
    assert fingerprint(root) == before  # all or nothing: notes.txt is untouched too


async def test_the_scratchpad_under_tiller_stays_writable(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    pad = root / ".tiller" / "scratch" / "thread-1"
    pad.mkdir(parents=True)
    ctx = ExecContext.for_test(root, phase=Phase.PLAN, scratchpad=pad)
    done = await run(ctx, "write_file", path=".tiller/scratch/thread-1/plan.md", content="x")
    assert done.outcome is Outcome.OK, done.result.content
    assert (pad / "plan.md").read_text() == "x"
    elsewhere = await run(ctx, "write_file", path=".tiller/other.json", content="x")
    _refused(elsewhere, ".tiller")


async def test_a_configured_hook_script_is_protected(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "policy-check.sh").write_text("#!/bin/sh\nexit 0\n")
    tools = Jail(root, safety=SafetyMode.FULL_ACCESS).with_protected("policy-check.sh")
    ctx = ExecContext.for_test(root, jail=tools)
    done = await run(ctx, "write_file", path="policy-check.sh", content="#!/bin/sh\nid\n")
    _refused(done, "policy-check.sh")
    assert (root / "policy-check.sh").read_text() == "#!/bin/sh\nexit 0\n"


def test_the_jail_filesystem_itself_refuses_protected_writes(tmp_path: Path) -> None:
    """The boundary holds for a tool that forgets to ask (`require_writable`)."""
    tools = Jail(tmp_path)
    fs = tools.fs
    assert isinstance(fs, JailFS)
    with pytest.raises(ProtectedPathRefused):
        fs.write_bytes(tools.resolve("tiller.toml"), b"[hooks]\n")
    with pytest.raises(ProtectedPathRefused):
        fs.mkdirs(tools.resolve(".git/hooks"))
    (tmp_path / ".tiller").mkdir()
    (tmp_path / ".tiller" / "x").write_text("x")
    with pytest.raises(ProtectedPathRefused):
        fs.unlink(tools.resolve(".tiller/x"))
    assert not (tmp_path / "tiller.toml").exists()
    assert (tmp_path / ".tiller" / "x").exists()


@pytest.mark.parametrize("where", ["", "docs/"], ids=["root", "subdirectory"])
@pytest.mark.parametrize(
    "order",
    [
        ("HEAD", "objects/info/.keep", "refs/heads/.keep", "config"),
        ("config", "refs/heads/.keep", "objects/info/.keep", "HEAD"),
    ],
    ids=["head-first", "config-first"],
)
async def test_a_git_directory_layout_cannot_be_completed(
    ctx: ExecContext, root: Path, where: str, order: tuple[str, ...]
) -> None:
    """No `.git` at all: HEAD, objects/ and refs/ make a plain directory a repository to
    git's discovery, and its `config` could name a `core.fsmonitor` command. Whatever the
    order, the write that would complete the layout is refused, and so is `config` of one."""
    outcomes = [
        (await run(ctx, "write_file", path=f"{where}{name}", content="x\n")).outcome
        for name in order
    ]
    assert Outcome.ERROR in outcomes
    directory = root / where if where else root
    layout = [(directory / name).exists() for name in ("HEAD", "objects", "refs")]
    assert not all(layout), "a git directory layout was written"


async def test_a_git_file_cannot_redirect_git(ctx: ExecContext, tmp_path: Path) -> None:
    """A `.git` *file* (`gitdir: build/cache`) points git at a directory the model wrote."""
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    fresh_ctx = ExecContext.for_test(fresh, jail=Jail(fresh, safety=SafetyMode.FULL_ACCESS))
    done = await run(fresh_ctx, "write_file", path=".git", content="gitdir: build/cache\n")
    _refused(done, ".git")
    assert not (fresh / ".git").exists()


async def test_ordinary_files_named_like_git_internals_are_written(ctx: ExecContext) -> None:
    """`config`, `HEAD` or `refs/` alone make no repository: only the whole layout does."""
    for path in ("app/config", "notes/HEAD", "docs/refs/index.md", "objects/model.py"):
        done = await run(ctx, "write_file", path=path, content="x\n")
        assert done.outcome is Outcome.OK, done.result.content


def test_opening_a_directory_to_create_it_is_a_protected_write(tmp_path: Path) -> None:
    fs = Jail(tmp_path).fs
    with pytest.raises(ProtectedPathRefused), fs.open_dir(tmp_path / ".git" / "hooks", create=True):
        pass
    assert not (tmp_path / ".git").exists()
    (tmp_path / ".tiller").mkdir()
    with fs.open_dir(tmp_path / ".tiller"):  # reading a protected directory is fine
        pass

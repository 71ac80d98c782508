"""Deferred host execution through `.git` (issue 13, defect 3): in `auto` the model plants
`core.fsmonitor` and hooks by every file tool and by the shell; the user's own next
`git status` and `git commit` in the workspace run nothing of it."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from .conftest import Host, call

BENIGN_HOOK = "#!/bin/sh\nexit 0\n"
GIT_ID = ["-c", "user.name=Person", "-c", "user.email=person@example.com"]


def git(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """git as the user runs it in their project (no hooks turned off)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    return subprocess.run(
        ["git", *GIT_ID, *args],
        cwd=workspace,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
        env=env,
    )


def person_repo(host: Host) -> Path:
    """A repository with one commit and an executable pre-commit hook the person
    installed (as the pre-commit framework does)."""
    ws = host.workspace
    assert git(ws, "init", "-q").returncode == 0
    assert git(ws, "add", "-A").returncode == 0
    assert git(ws, "commit", "-q", "-m", "start").returncode == 0
    hook = ws / ".git" / "hooks" / "pre-commit"
    hook.write_text(BENIGN_HOOK)
    hook.chmod(0o755)
    return ws


def the_user_runs_git(host: Host) -> None:
    ws = host.workspace
    (ws / "change.txt").write_text("a change of the user's\n")
    git(ws, "status")
    git(ws, "add", "change.txt")
    git(ws, "commit", "-q", "-m", "user commit")
    git(ws, "status", "--porcelain")


def test_file_tools_cannot_plant_git_config_or_hooks_in_auto(host: Host) -> None:
    ws = person_repo(host)
    config = (ws / ".git" / "config").read_text()
    evil_config = config + f"[core]\n\tfsmonitor = {host.marker_command}; false\n"
    evil_hook = f"#!/bin/sh\n{host.marker_command}\nexit 0\n"
    patch = (
        "--- a/.git/hooks/pre-commit\n+++ b/.git/hooks/pre-commit\n"
        "@@ -1,2 +1,3 @@\n #!/bin/sh\n"
        f"+{host.marker_command}\n"
        " exit 0\n"
    )
    done = host.run(
        [
            call("write_file", path=".git/config", content=evil_config),
            call(
                "edit_file",
                path=".git/config",
                old="[core]\n",
                new=f"[core]\n\tfsmonitor = {host.marker_command}; false\n",
            ),
            call("apply_patch", patch=patch),
            call("edit_file", path=".git/hooks/pre-commit", old="exit 0", new=evil_hook),
            call("write_file", path=".git/hooks/post-commit", content=evil_hook),
            "Done.",
        ],
        "--mode",
        "auto",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    the_user_runs_git(host)
    host.assert_untouched()
    assert (ws / ".git" / "config").read_text() == config, "the model rewrote .git/config"
    assert (ws / ".git" / "hooks" / "pre-commit").read_text() == BENIGN_HOOK


def test_the_shell_cannot_plant_git_config_or_hooks_even_with_yes(host: Host) -> None:
    ws = person_repo(host)
    config = (ws / ".git" / "config").read_text()
    marker = host.marker_command
    done = host.run(
        [
            call("execute_command", command=f"git config core.fsmonitor '{marker}; false'"),
            call(
                "execute_command",
                command=f"printf '[core]\\n\\tfsmonitor = {marker}; false\\n' >> .git/config",
            ),
            call(
                "execute_command",
                command=f"printf '#!/bin/sh\\n{marker}\\n' > evil.sh && chmod +x evil.sh"
                " && cp evil.sh .git/hooks/pre-commit && cp evil.sh .git/hooks/post-checkout",
            ),
            "Done.",
        ],
        "--mode",
        "auto",
        "--yes",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    the_user_runs_git(host)
    host.assert_untouched()
    assert (ws / ".git" / "config").read_text() == config, "a shell command rewrote .git/config"
    assert (ws / ".git" / "hooks" / "pre-commit").read_text() == BENIGN_HOOK
    assert not (ws / ".git" / "hooks" / "post-checkout").exists()


def test_the_model_cannot_make_a_new_repository_that_runs_on_git_status(host: Host) -> None:
    """The workspace is no repository yet: the model writes a whole `.git` (HEAD, refs,
    objects, a config with core.fsmonitor) so that the user's first `git status` in it
    runs its command."""
    ws = host.workspace
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {host.marker_command}; false\n"
    done = host.run(
        [
            call("write_file", path=".git/HEAD", content="ref: refs/heads/main\n"),
            call("write_file", path=".git/objects/info/.keep", content=""),
            call("write_file", path=".git/refs/heads/.keep", content=""),
            call("write_file", path=".git/config", content=config),
            "Done.",
        ],
        "--mode",
        "auto",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    git(ws, "status")
    host.assert_untouched()


def test_a_nested_repository_is_protected_too(host: Host) -> None:
    """A vendored repository inside the workspace (`vendor/lib/.git`) is as much the
    user's as the top one: its config and hooks are not the model's to write."""
    ws = person_repo(host)
    nested = ws / "vendor" / "lib"
    nested.mkdir(parents=True)
    (nested / "lib.py").write_text("x = 1\n")
    assert git(nested, "init", "-q").returncode == 0
    config = (nested / ".git" / "config").read_text()
    evil = config + f"[core]\n\tfsmonitor = {host.marker_command}; false\n"
    done = host.run(
        [call("write_file", path="vendor/lib/.git/config", content=evil), "Done."],
        "--mode",
        "auto",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    git(nested, "status")
    host.assert_untouched()
    assert (nested / ".git" / "config").read_text() == config


def test_a_gitdir_file_cannot_point_git_at_a_directory_the_model_built(host: Host) -> None:
    """In a workspace that is no repository, a `.git` *file* saying `gitdir: build/cache`
    makes git use `build/cache` as the repository: its config is then the model's, though
    no path under `.git/` was written."""
    ws = host.workspace
    config = f"[core]\n\trepositoryformatversion = 0\n\tfsmonitor = {host.marker_command}; false\n"
    done = host.run(
        [
            call("write_file", path="build/cache/HEAD", content="ref: refs/heads/main\n"),
            call("write_file", path="build/cache/objects/info/.keep", content=""),
            call("write_file", path="build/cache/refs/heads/.keep", content=""),
            call("write_file", path="build/cache/config", content=config),
            call("write_file", path=".git", content="gitdir: build/cache\n"),
            "Done.",
        ],
        "--mode",
        "auto",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    git(ws, "status")
    host.assert_untouched()


@pytest.mark.parametrize("where", [".", "docs"], ids=["workspace-root", "subdirectory"])
def test_a_bare_repository_layout_cannot_be_planted(host: Host, where: str) -> None:
    """No `.git` at all: `HEAD`, `objects/`, `refs/` and a `config` with `bare = false`,
    `worktree = .` and core.fsmonitor make the directory itself a repository to git's
    discovery, so the user's `git status` there runs the planted command. (Beyond the
    issue's list of paths: a sibling found while red-teaming.)"""
    ws = person_repo(host) if where != "." else host.workspace
    config = (
        "[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = .\n"
        f"\tfsmonitor = {host.marker_command}; false\n"
    )
    prefix = "" if where == "." else f"{where}/"
    done = host.run(
        [
            call("write_file", path=f"{prefix}HEAD", content="ref: refs/heads/main\n"),
            call("write_file", path=f"{prefix}objects/info/.keep", content=""),
            call("write_file", path=f"{prefix}refs/heads/.keep", content=""),
            call("write_file", path=f"{prefix}config", content=config),
            "Done.",
        ],
        "--mode",
        "auto",
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    git(ws / where, "status")
    host.assert_untouched()

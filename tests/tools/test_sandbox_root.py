"""issue 13, item 1: when tiller runs as root, a sandboxed command never runs as kernel
uid 0, and the kernel's knobs are read-only to it.

These tests run only as root (CI runs the suite as root). None of them changes a
sysctl: writability is tested by opening for writing without writing a byte.
"""

from __future__ import annotations

import errno
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tiller.tools import ExecContext, Jail, Sandbox, SandboxUnavailable
from tiller.tools.builtin import execute_command_tool

from .conftest import RunTool
from .shell_support import SANDBOX_MISSING, SANDBOX_REASON, run

pytestmark = [
    pytest.mark.skipif(SANDBOX_MISSING, reason=f"bwrap is unavailable: {SANDBOX_REASON}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="what tiller does when it runs as root"),
]

#: Opens each path for writing (no byte is written) and says whether that worked.
OPEN_FOR_WRITING = (
    "python3 -c 'import os, sys\n"
    "for p in sys.argv[1:]:\n"
    '    try: os.close(os.open(p, os.O_WRONLY)); print(p, "WRITABLE")\n'
    '    except OSError as e: print(p, "refused", e.strerror)\' '
)


async def test_the_command_is_not_uid_0(ctx: ExecContext) -> None:
    done = await run(ctx, command="id -u; id -g; id -G; grep Cap /proc/self/status")
    lines = done.result.content.splitlines()
    assert lines[0] != "0" and lines[1] != "0" and lines[2] == lines[1]
    caps = dict(line.split(":\t") for line in lines[3:] if ":\t" in line)
    for kind in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert int(caps[kind], 16) == 0, (kind, done.result.content)


async def test_kernel_knobs_cannot_be_opened_for_writing(ctx: ExecContext) -> None:
    knobs = ["/proc/sys/kernel/core_pattern", "/proc/sys/kernel/modprobe", "/proc/sysrq-trigger"]
    done = await run(ctx, command=OPEN_FOR_WRITING + " ".join(knobs))
    content = done.result.content
    assert "WRITABLE" not in content, content
    assert content.count("refused") == len(knobs), content


async def test_sys_is_not_writable(ctx: ExecContext) -> None:
    done = await run(
        ctx, command="touch /sys/tiller-x 2>&1; echo 1 > /sys/kernel/mm/x 2>&1; echo end"
    )
    content = done.result.content
    assert content.count("touch:") == 1 and "end" in content
    assert "No such file" in content or "Read-only" in content or "denied" in content


def _root_only_file_under_etc() -> Path | None:
    """A root-owned regular file under /etc that others may not read (not a password
    database, which the sandbox hides anyway)."""
    hidden = {"shadow", "gshadow", "shadow-", "gshadow-"}
    for top, dirs, files in os.walk("/etc"):
        dirs.sort()
        for name in sorted(files):
            path = Path(top, name)
            try:
                info = path.lstat()
            except OSError:
                continue
            if (
                stat.S_ISREG(info.st_mode)
                and info.st_uid == 0
                and not info.st_mode & stat.S_IROTH
                and name not in hidden
            ):
                return path
    return None


async def test_root_only_files_are_unreadable(ctx: ExecContext) -> None:
    done = await run(ctx, command="cat /etc/gshadow /etc/shadow 2>/dev/null | wc -c")
    assert done.result.content.splitlines()[0] == "0"
    secret = _root_only_file_under_etc()
    if secret is None:
        pytest.skip("this host has no root-only file under /etc")
    done = await run(ctx, command=f"cat {secret} >/dev/null && echo READ")
    assert "READ" not in done.result.content and "Permission denied" in done.result.content


async def test_the_workspace_stays_writable_both_ways(ctx: ExecContext, run_tool: RunTool) -> None:
    root = ctx.jail.root
    (root / "sub").mkdir(mode=0o700)  # root's, private
    (root / "sub" / "by-root.txt").write_text("root\n")
    os.chmod(root / "sub" / "by-root.txt", 0o600)
    written = await run_tool("write_file", path="by-tiller.txt", content="tiller\n")
    assert not written.is_error, written.result.content
    done = await run(
        ctx,
        command="echo more >> by-tiller.txt && echo more >> sub/by-root.txt && "
        "mkdir -p made/deep && echo cmd > made/deep/f.txt && rm sub/by-root.txt && "
        "echo again > sub/by-root.txt && echo ok",
    )
    assert done.result.content == "ok\n[exit code 0]", done.result.content
    assert (root / "by-tiller.txt").read_text() == "tiller\nmore\n"
    # What the command made, tiller's own file tools read and edit afterwards.
    edited = await run_tool("edit_file", path="made/deep/f.txt", old="cmd", new="edited")
    assert not edited.is_error, edited.result.content
    read = await run_tool("read_file", path="sub/by-root.txt")
    assert "again" in read.result.content
    done = await run(ctx, command="cat made/deep/f.txt")
    assert done.result.content == "edited\n[exit code 0]"


async def test_the_grant_stays_inside_the_workspace(tmp_path: Path) -> None:
    jail = tmp_path / "jail"
    outside = tmp_path / "outside"
    jail.mkdir()
    outside.mkdir()
    target = outside / "target.txt"
    target.write_text("outside\n")
    (jail / "dir-link").symlink_to(outside)
    (jail / "file-link").symlink_to(target)
    os.link(target, jail / "hard-link")  # the same inode as a file outside
    ctx = ExecContext.for_test(jail)
    done = await run(
        ctx,
        command="echo x >> hard-link; echo x >> file-link; echo x > dir-link/new; echo end",
    )
    assert "end" in done.result.content
    assert target.read_text() == "outside\n"
    assert not (outside / "new").exists()
    for path in (outside, target):
        with pytest.raises(OSError):  # no ACL was written there (ENODATA)
            os.getxattr(path, "system.posix_acl_access")


async def test_a_python_under_root_runs_when_bound(ctx: ExecContext) -> None:
    shell = execute_command_tool(Sandbox(ro_binds=Sandbox.python_paths()))
    done = await run(
        ctx, tools=[shell], command=f"{sys.executable} -c 'import os; print(os.getuid())'"
    )
    assert done.result.content.splitlines()[0] != "0", done.result.content
    assert done.result.content.endswith("[exit code 0]")


def _git_init(root: Path) -> None:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_SYSTEM": "/dev/null"}
    subprocess.run(["git", "init", "-q", str(root)], check=True, env=env)


async def test_git_works_in_a_root_owned_repository(ctx: ExecContext) -> None:
    root = ctx.jail.root
    _git_init(root)
    (root / "a.txt").write_text("a\n")
    done = await run(
        ctx,
        command="git status --short && git add a.txt && "
        "git -c user.name=t -c user.email=t@example.com commit -qm one && git log --format=%s",
    )
    assert done.result.content == "?? a.txt\none\n[exit code 0]", done.result.content


async def test_without_setpriv_the_shell_refuses(ctx: ExecContext) -> None:
    shell = execute_command_tool(Sandbox(setpriv="/nonexistent/setpriv"))
    done = await run(ctx, tools=[shell], command="touch ran")
    assert done.is_error and "setpriv" in done.result.content
    assert not (ctx.jail.root / "ran").exists()
    with pytest.raises(SandboxUnavailable, match="setpriv"):
        Sandbox(setpriv="/nonexistent/setpriv").command(["true"], jail=ctx.jail.root, network=False)


async def test_an_explicit_root_user_is_refused(ctx: ExecContext) -> None:
    shell = execute_command_tool(Sandbox(user="root"))
    done = await run(ctx, tools=[shell], command="touch ran")
    assert done.is_error and "uid or gid 0" in done.result.content
    assert not (ctx.jail.root / "ran").exists()


async def test_a_workspace_owned_by_a_user_runs_as_that_user(tmp_path: Path) -> None:
    jail = tmp_path / "jail"
    jail.mkdir()
    os.chown(jail, 12345, 12345)  # a uid with no passwd entry: group nobody's
    ctx = ExecContext.for_test(jail, jail=Jail(jail))
    done = await run(ctx, command="id -u; touch mine; stat -c %u mine")
    assert done.result.content == "12345\n12345\n[exit code 0]", done.result.content


async def test_a_workspace_that_refuses_acls_is_refused_not_run_as_root(
    ctx: ExecContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tiller.tools import _sandbox

    def no_acls(jail: Path, uid: int, skip: object) -> None:  # as on a filesystem mounted `noacl`
        raise OSError(errno.EOPNOTSUPP, os.strerror(errno.EOPNOTSUPP))

    monkeypatch.setattr(_sandbox, "grant_workspace", no_acls)
    done = await run(ctx, tools=[execute_command_tool(Sandbox())], command="touch ran")
    assert done.is_error and "cannot be made writable" in done.result.content
    assert "Operation not supported" in done.result.content
    assert not (ctx.jail.root / "ran").exists()


async def test_protected_paths_get_no_acl(ctx: ExecContext) -> None:
    root = ctx.jail.root
    _git_init(root)
    done = await run(ctx, command="echo x > a.txt && git add a.txt && echo ok")
    assert done.result.content == "ok\n[exit code 0]", done.result.content
    os.getxattr(root / ".git" / "objects", "system.posix_acl_access")  # granted
    for protected in (".git/config", ".git/hooks", ".tiller"):
        with pytest.raises(OSError):  # ENODATA: never granted
            os.getxattr(root / protected, "system.posix_acl_access")
    with pytest.raises(OSError):
        os.getxattr(root / ".git", "system.posix_acl_default")


def test_a_wide_tree_does_not_exhaust_descriptors(tmp_path: Path) -> None:
    """The grant once held a descriptor per queued directory: 2,000 sibling directories
    under a limit of 1,024 open files made every later command fail with EMFILE. It holds
    one per level now, whatever the width."""
    import resource

    from tiller.tools._workspace_acl import grant_workspace

    jail = tmp_path / "wide"
    jail.mkdir()
    for n in range(2000):
        (jail / f"d{n}").mkdir()
    (jail / "d7" / "f.txt").write_text("x\n")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(1024, hard), hard))
    try:
        grant_workspace(jail, 65534)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert os.getxattr(jail / "d1999", "system.posix_acl_access")
    assert os.getxattr(jail / "d7" / "f.txt", "system.posix_acl_access")

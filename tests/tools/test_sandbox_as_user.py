"""issue 13, "the sandbox never runs as uid 0", as an ordinary user: a real user made for
the test runs the sandbox's own command line (unprivileged bwrap, in a user namespace) in
a workspace it owns. Needs root to create the user; skipped elsewhere.

The user cannot run tiller itself here (the test's Python lives under /root, which it may
not read, and the system Python lacks tiller's dependencies), so the command line is built
as it would be for that user and run with `runuser`.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tiller.tools import Sandbox, _sandbox
from tiller.tools._protected_snapshot import ProtectedSnapshot

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not (shutil.which("useradd") and shutil.which("runuser")),
    reason="creating a user needs root, useradd and runuser",
)


@dataclass
class User:
    name: str
    uid: int
    workspace: Path


@pytest.fixture
def user() -> Iterator[User]:
    name = f"tiller-t-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", name],
        check=True,
        capture_output=True,
    )
    # Outside pytest's 0700 base directory, so the user can reach it.
    top = Path(tempfile.mkdtemp(prefix="tiller-user-test-", dir="/tmp"))
    try:
        os.chmod(top, 0o755)
        workspace = top / "ws"
        workspace.mkdir()
        uid = pwd.getpwnam(name).pw_uid
        os.chown(workspace, uid, pwd.getpwnam(name).pw_gid)
        probe = subprocess.run(
            ["runuser", "-u", name, "--", "bwrap", "--unshare-user", "--ro-bind", "/", "/", "true"],
            capture_output=True,
            check=False,
        )
        if probe.returncode != 0:
            pytest.skip(f"unprivileged bwrap does not work here: {probe.stderr!r}")
        yield User(name, uid, workspace.resolve())
    finally:
        shutil.rmtree(top)
        subprocess.run(["userdel", name], check=False, capture_output=True)


def _as_user(
    user: User, argv: list[str], pass_fds: tuple[int, ...]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", user.name, "--", *argv],
        pass_fds=pass_fds,
        cwd=user.workspace,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def test_an_ordinary_user_runs_commands_as_itself_with_kernel_knobs_read_only(
    user: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_sandbox, "_running_as_root", lambda: False)
    (user.workspace / "tiller.toml").write_text('mode = "ask"\n')
    snapshot = ProtectedSnapshot.take(user.workspace, ("tiller.toml", ".tiller"))
    command = (
        "id -u; test -w /proc/sys/kernel/core_pattern || echo core-ro; "
        "test -w /proc/sysrq-trigger || echo sysrq-ro; "
        "echo x > /proc/sys/kernel/core_pattern 2>/dev/null || echo core-refused; "
        "unshare -Ur true 2>/dev/null || echo no-nested-userns; "
        "echo 'mode = \"full_access\"' >> tiller.toml 2>/dev/null || echo toml-ro; "
        "echo made > made.txt && echo wrote"
    )
    argv = Sandbox().command(
        ["bash", "-c", command], jail=user.workspace, network=False, protect=snapshot
    )
    assert "setpriv" not in " ".join(argv) and "--unshare-user" in argv
    try:
        done = _as_user(user, argv, snapshot.fds())
    finally:
        snapshot.release()
    assert done.stdout.splitlines() == [
        str(user.uid),
        "core-ro",
        "sysrq-ro",
        "core-refused",
        "no-nested-userns",
        "toml-ro",
        "wrote",
    ], done.stderr
    made = user.workspace / "made.txt"
    assert made.read_text() == "made\n" and made.stat().st_uid == user.uid
    assert (user.workspace / "tiller.toml").read_text() == 'mode = "ask"\n'
    assert snapshot.undo() == []

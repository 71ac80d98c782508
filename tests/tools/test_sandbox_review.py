"""Found in review: the sandbox binary is resolved once (a `bwrap` a command plants in a
directory of the host's PATH never runs as the sandbox), and the host's password hashes
are hidden even from a command running with root's uid."""

from __future__ import annotations

from pathlib import Path

import pytest

from tiller.tools import ExecContext, Jail, Sandbox, SandboxUnavailable

from .shell_support import SANDBOX_MISSING, SANDBOX_REASON, run

pytestmark = pytest.mark.skipif(SANDBOX_MISSING, reason=f"bwrap is unavailable: {SANDBOX_REASON}")


def test_bwrap_is_resolved_once_and_never_from_the_jail(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    jail = tmp_path / "jail"
    (jail / "bin").mkdir(parents=True)
    sandbox = Sandbox()
    first = sandbox.executable()
    assert first is not None and Path(first).is_absolute()
    fake = jail / "bin" / "bwrap"
    fake.write_text('#!/bin/sh\nexec "$@"\n')
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{jail / 'bin'}:/usr/bin:/bin")
    assert sandbox.executable() == first  # a later PATH does not change the binary
    planted = Sandbox(bwrap=str(fake))
    with pytest.raises(SandboxUnavailable, match="inside the workspace"):
        planted.command(["true"], jail=jail, network=False)


async def test_password_hashes_are_hidden(tmp_path: Path) -> None:
    ctx = ExecContext.for_test(tmp_path, jail=Jail(tmp_path))
    done = await run(ctx, command="cat /etc/shadow /etc/gshadow; echo done")
    assert "root:" not in done.result.content, done.result.content
    assert "done" in done.result.content

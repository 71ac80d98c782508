"""`SandboxUser`: the unprivileged uid shell commands run as when tiller itself is root.

A sandboxed command must never be kernel uid 0: even with no capabilities and in its own
namespaces, uid 0 passes the ownership checks of `/proc/sys` (a write to
`kernel.core_pattern` makes the kernel run a program as host root) and reads every
root-only file bound into the sandbox. So when tiller runs as root the command drops to
another uid, chosen here, in this order:

1. the uid given explicitly (`Sandbox(user=...)`: a name or a number);
2. the owner of the workspace, if that is not root (root running tiller over a person's
   checkout: the command acts as that person);
3. the `tiller-sandbox` system user, if the host has one (`scripts/setup-system.sh
   --sandbox-user` creates it);
4. `nobody` (65534).

The group is the user's primary group (65534 for a uid with no passwd entry), and
supplementary groups are cleared, so a group such as `docker` or `shadow` the user is in
grants the command nothing.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import UsageError

__all__ = ["NOBODY", "SANDBOX_USER_NAME", "SandboxUser", "choose_sandbox_user"]

#: The system user `scripts/setup-system.sh --sandbox-user` creates.
SANDBOX_USER_NAME: Final = "tiller-sandbox"
#: uid and gid of `nobody` / `nogroup` on Linux distributions.
NOBODY: Final = 65534


@dataclass(frozen=True, slots=True)
class SandboxUser:
    """A uid and gid a command runs as; `uid` is never 0."""

    uid: int
    gid: int

    def __post_init__(self) -> None:
        if self.uid == 0 or self.gid == 0:
            raise UsageError("a sandboxed command must not run as uid or gid 0 (root)")


def _by_name_or_uid(user: str | int) -> SandboxUser:
    try:
        entry = pwd.getpwuid(user) if isinstance(user, int) else pwd.getpwnam(user)
    except KeyError:
        if isinstance(user, int):
            return SandboxUser(user, NOBODY)
        raise UsageError(
            f"the sandbox user {user!r} does not exist on this machine; create it (for "
            "`tiller-sandbox`: `scripts/setup-system.sh --sandbox-user`) or pass a uid"
        ) from None
    return SandboxUser(entry.pw_uid, entry.pw_gid or NOBODY)


def choose_sandbox_user(jail: Path, user: str | int | None = None) -> SandboxUser:
    """The user a command in `jail` runs as when tiller is root (see the module doc)."""
    if user is not None:
        return _by_name_or_uid(user)
    owner = os.stat(jail).st_uid
    if owner != 0:
        return _by_name_or_uid(owner)
    try:
        entry = pwd.getpwnam(SANDBOX_USER_NAME)
    except KeyError:
        return SandboxUser(NOBODY, NOBODY)
    return SandboxUser(entry.pw_uid, entry.pw_gid or NOBODY)

"""`Sandbox`: the bubblewrap jail shell commands run in (DESIGN §11).

`bwrap` is the security boundary of the shell; the shell classifier only estimates risk.
A command runs as `bwrap ... bash -c COMMAND` in fresh namespaces, in a new session (so
it cannot push keystrokes into our terminal with `TIOCSTI`), killed if we die, and never
as kernel uid 0. What it sees:

| path | how |
|---|---|
| `/usr`, `/etc`, `/opt` | the host's, read-only (`/etc/shadow` and `gshadow` hidden) |
| `/bin`, `/sbin`, `/lib*` | the host's symlinks (merged-usr), or read-only binds |
| `/proc`, `/dev` | fresh: its own pid namespace, a minimal `/dev` |
| `/proc/sys`, `/proc/sysrq-trigger`, `/proc/irq`, `/proc/bus` | read-only |
| `/sys` | absent |
| `/tmp`, `$HOME`, `/root` | empty tmpfs, gone when the command ends |
| the jail | the host's directory, read-write, at its real path, as the working directory |
| protected paths in the jail | read-only (`tiller.toml`, `.git/config`, ...: `ProtectedSnapshot`) |
| anything else | absent; `/` itself is read-only |

Who the command is depends on who tiller is:

- **An ordinary user**: bwrap is unprivileged (`--unshare-all --unshare-user
  --disable-userns --cap-drop ALL`); the command is that user inside a user namespace,
  with no capabilities and no way to make a nested user namespace.
- **Root**: a user namespace made by root maps the command to host uid 0, and host uid 0
  passes the ownership checks of `/proc/sys` (writing `kernel.core_pattern` is host code
  execution) and of every root-only file. So bwrap runs as root *without* a user
  namespace (root performs the mounts, so a Python under `/root` can still be bound) and
  `setpriv` drops to an unprivileged uid before the command starts: no supplementary
  groups, empty capability sets including the bounding set, `no_new_privs` (a setuid
  binary gains nothing). The uid is the workspace's owner, else `tiller-sandbox`, else
  `nobody` (`_sandbox_user`); the workspace is granted to it with POSIX ACLs
  (`_workspace_acl`) and git is told it is a safe directory. Without `setpriv`, or on a
  filesystem without ACLs, the shell refuses: it never falls back to uid 0. A command can
  still make a nested user namespace here; the mounts it inherits are locked, and it is
  root only over that namespace.

The network is a private loopback unless the run grants the network
(`Jail.with_network()`), and the environment is rebuilt from scratch (`PATH`, `HOME`,
`LANG`, `TERM=dumb`, `PAGER=cat`, `GIT_PAGER=cat`), so no token in our environment leaks
into a command.

Whether bwrap works on this machine is probed once per `Sandbox` by running `true` under
the same flags (bwrap missing, or user namespaces disabled, are the usual failures); the
module's default sandbox is shared, so a process probes once. Where it does not work,
`require()` raises `SandboxUnavailable` with what to do about it, and the shell refuses
to run unless the run explicitly accepts an unsandboxed shell.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import TillerError, UsageError
from ._jail import PROTECTED_PATHS
from ._protected_snapshot import ProtectedSnapshot
from ._sandbox_user import SandboxUser, choose_sandbox_user
from ._workspace_acl import grant_workspace

__all__ = [
    "DEFAULT_SANDBOX",
    "SANDBOX_PATH",
    "Sandbox",
    "SandboxProbe",
    "SandboxUnavailable",
]

#: `PATH` inside the sandbox (the host's own may name directories the sandbox hides).
SANDBOX_PATH: Final = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#: Directories bound read-only (or recreated as the same symlinks) when the host has them.
_SYSTEM_DIRS: Final = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
#: Files a command must never read: unreadable to the sandbox's uid anyway, and hidden
#: as well, in case a user's group could read them.
_SECRET_FILES: Final = ("/etc/shadow", "/etc/gshadow", "/etc/shadow-", "/etc/gshadow-")
#: Bound read-only only if present: third-party software some hosts keep there.
_OPTIONAL_DIRS: Final = ("/opt",)
#: How long the availability probe may take before it counts as a failure.
_PROBE_SECONDS: Final = 30.0
_HOW_TO_FIX: Final = (
    "Install bubblewrap (`scripts/setup-system.sh`, or `apt-get install bubblewrap` on "
    "Debian and Ubuntu) on a machine where user namespaces are enabled; or, only where "
    "you would let the model type into your own terminal, accept an unsandboxed shell "
    "with `Jail.with_unsandboxed_shell()`."
)


class SandboxUnavailable(TillerError):
    """The shell's sandbox cannot run here: `bwrap` is missing, or the kernel refuses
    the namespaces it needs. `reason` says which; the message says what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(
            f"shell commands run only inside the bubblewrap sandbox, and it is unavailable "
            f"here: {reason}. {_HOW_TO_FIX}"
        )
        self.reason = reason


@dataclass(frozen=True, slots=True)
class SandboxProbe:
    """What probing found: whether the sandbox works, and if not, why."""

    available: bool
    reason: str = ""


class Sandbox:
    """How shell commands are jailed: a `bwrap` binary, plus the command line around it.

    ```python
    sandbox = Sandbox()                                  # `bwrap` from PATH
    sandbox.require()                                    # or SandboxUnavailable
    argv = sandbox.command(["bash", "-c", "make"], jail=root, network=False)
    ```

    - `bwrap`: the binary, a name looked up on `PATH` or a path. Point it at a missing
      file to see the refusal path.
    - `ro_binds`: more host paths to show read-only at the same place (for example a
      Python installation under `/root` that the tmpfs over the home directory would
      hide); missing ones are skipped. `Sandbox.python_paths()` lists the running
      interpreter's.
    - `path`: `PATH` inside the sandbox.
    - `user`: when tiller runs as root, the user (name or uid, never root) commands run
      as; by default the workspace's owner, else `tiller-sandbox`, else `nobody`
      (`_sandbox_user`).
    - `setpriv`: the `setpriv` binary that drops root to that user (looked up on the
      sandbox's `PATH`); point it at a missing file to see the refusal path.

    The probe's answer is cached on the instance, so share one (the module's
    `DEFAULT_SANDBOX`) to probe once per process.
    """

    __slots__ = (
        "_bwrap",
        "_lock",
        "_probe",
        "_resolved",
        "_setpriv_name",
        "path",
        "ro_binds",
        "user",
    )

    def __init__(
        self,
        bwrap: str | os.PathLike[str] = "bwrap",
        *,
        ro_binds: Sequence[str | os.PathLike[str]] = (),
        path: str = SANDBOX_PATH,
        user: str | int | None = None,
        setpriv: str = "setpriv",
    ) -> None:
        self._bwrap = os.fspath(bwrap)
        self.user = user
        self._setpriv_name = setpriv
        # Resolved once, on first use, to an absolute path: looked up on every call, a
        # `bwrap` a command wrote into a directory of the host's PATH (an activated
        # venv's bin inside the workspace) would run the next command unsandboxed.
        self._resolved: str | None = None
        self.ro_binds: tuple[Path, ...] = tuple(Path(p).absolute() for p in ro_binds)
        self.path = path
        self._lock = threading.Lock()
        self._probe: SandboxProbe | None = None

    @staticmethod
    def python_paths() -> tuple[Path, ...]:
        """The running interpreter's installation and virtual environment, to pass as
        `ro_binds` when commands must run this Python (`sys.executable`)."""
        found = sorted(
            {Path(sys.prefix), Path(sys.base_prefix), Path(sys.executable).resolve().parent}
        )
        # A directory inside another one listed is shown with it already.
        return tuple(p for p in found if not any(p != q and p.is_relative_to(q) for q in found))

    # ── availability ─────────────────────────────────────────────────────────────

    def executable(self) -> str | None:
        """The absolute real path of the `bwrap` binary, found once, or `None`."""
        if self._resolved is None:
            found = shutil.which(self._bwrap)
            if found is not None:
                self._resolved = os.path.realpath(found)
        return self._resolved

    def probe(self) -> SandboxProbe:
        """Whether the sandbox works here: runs `true` under the real flags, once.

        Blocks for as long as bwrap takes to start (milliseconds); from async code use
        `probe_async`. Thread-safe: concurrent first calls run one probe.
        """
        with self._lock:
            if self._probe is None:
                self._probe = self._run_probe()
            return self._probe

    async def probe_async(self) -> SandboxProbe:
        """`probe()`, in a worker thread the first time, so the event loop never waits."""
        if self._probe is not None:
            return self._probe
        return await asyncio.to_thread(self.probe)

    async def require(self) -> None:
        """Return if the sandbox works; raise `SandboxUnavailable` saying why not."""
        probe = await self.probe_async()
        if not probe.available:
            raise SandboxUnavailable(probe.reason)

    def _run_probe(self) -> SandboxProbe:
        binary = self.executable()
        if binary is None:
            return SandboxProbe(False, f"`{self._bwrap}` is not installed (not found)")
        with tempfile.TemporaryDirectory(prefix="tiller-probe-") as jail:
            try:
                # No ACL grant: `true` writes nothing, and the probe's directory may sit
                # on another filesystem than the workspaces.
                argv = self._argv(
                    ["true"], jail=Path(jail).resolve(), network=False, protect=None, grant=False
                )
            except SandboxUnavailable as exc:
                return SandboxProbe(False, exc.reason)
            try:
                done = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                    timeout=_PROBE_SECONDS,
                    check=False,
                )
            except (OSError, subprocess.SubprocessError) as exc:
                return SandboxProbe(False, f"`{binary}` could not be run: {exc}")
        if done.returncode != 0:
            detail = done.stderr.decode("utf-8", errors="replace").strip() or (
                f"exit code {done.returncode}"
            )
            return SandboxProbe(
                False, f"`{binary}` cannot create its namespaces on this machine ({detail})"
            )
        return SandboxProbe(True)

    # ── the command line ─────────────────────────────────────────────────────────

    def command(
        self,
        argv: Sequence[str],
        *,
        jail: Path,
        network: bool,
        protect: ProtectedSnapshot | None = None,
    ) -> list[str]:
        """`argv` wrapped in bwrap: run in `jail` (an absolute real path, bound
        read-write), with the host network only if `network` is granted, and the paths
        `protect` found bound over themselves (read-only where they exist).

        When tiller is root this also grants the sandbox's uid access to the workspace
        (`_workspace_acl`): a walk of the workspace, so call it off the event loop.
        Raises `SandboxUnavailable` where a command would otherwise run as uid 0.
        """
        return self._argv(argv, jail=jail, network=network, protect=protect, grant=True)

    def _argv(
        self,
        argv: Sequence[str],
        *,
        jail: Path,
        network: bool,
        protect: ProtectedSnapshot | None,
        grant: bool,
    ) -> list[str]:
        binary = self.executable()
        if binary is None:
            raise SandboxUnavailable(f"`{self._bwrap}` is not installed (not found)")
        if Path(binary).is_relative_to(jail):
            # Whatever is in the jail, a command may have written: never run it as the
            # sandbox itself.
            raise SandboxUnavailable(f"`{binary}` lies inside the workspace; refusing to run it")
        skip = protect.protected if protect is not None else PROTECTED_PATHS
        user = self._drop_to(jail, grant=grant, skip=skip) if _running_as_root() else None
        home = _home()
        args = _namespaces(binary, as_user=user is not None, network=network)
        args += _host_binds(network=network)
        args += ["--proc", "/proc", *_kernel_knobs(), "--dev", "/dev"]
        # World-writable (sticky) as a normal /tmp: the tmpfs belongs to whoever mounts
        # it, which as root is not the uid the command runs as.
        args += ["--perms", "1777", "--tmpfs", "/tmp"]
        args += _hidden_homes(home)
        for extra in self.ro_binds:
            if extra.exists():
                args += [*_searchable_parents(extra), "--ro-bind", str(extra), str(extra)]
        args += _searchable_parents(jail)
        # Last, so a jail under /tmp or the home directory stays visible over the tmpfs.
        args += ["--bind", str(jail), str(jail)]
        if protect is not None:
            args += protect.binds()
        args += ["--chdir", str(jail)]
        # bwrap's own root (a tmpfs holding the mount points) becomes read-only too, so a
        # write outside the jail, /tmp and the home directory fails instead of vanishing.
        args += ["--remount-ro", "/", "--clearenv"]
        env = self.environment(home)
        if user is not None:
            env |= _git_trusts(jail)
        for key, value in env.items():
            args += ["--setenv", key, value]
        args.append("--")
        if user is not None:
            args += self._setpriv(jail, user)
        args += argv
        return args

    def _drop_to(self, jail: Path, *, grant: bool, skip: Sequence[str]) -> SandboxUser:
        """As root: the uid the command runs as, with the workspace granted to it."""
        try:
            user = choose_sandbox_user(jail, self.user)
        except UsageError as exc:
            raise SandboxUnavailable(str(exc)) from exc
        if not grant:
            return user
        try:
            grant_workspace(jail, user.uid, skip)
        except OSError as exc:
            raise SandboxUnavailable(
                f"tiller runs as root, so commands run as uid {user.uid}, but the workspace "
                f"{str(jail)!r} cannot be made writable to it with ACLs ({exc.strerror or exc}); "
                "run tiller as the workspace's owner, or put the workspace on a filesystem "
                "with POSIX ACLs"
            ) from exc
        return user

    def _setpriv(self, jail: Path, user: SandboxUser) -> list[str]:
        found = shutil.which(self._setpriv_name, path=SANDBOX_PATH)
        if found is None:
            raise SandboxUnavailable(
                "tiller runs as root and `setpriv` (util-linux) is not installed, so "
                "commands cannot drop to an unprivileged uid; install util-linux, or run "
                "tiller as an ordinary user"
            )
        real = os.path.realpath(found)
        if Path(real).is_relative_to(jail):
            raise SandboxUnavailable(f"`{real}` lies inside the workspace; refusing to run it")
        return [
            real,
            f"--reuid={user.uid}",
            f"--regid={user.gid}",
            "--clear-groups",
            "--inh-caps=-all",
            "--bounding-set=-all",
            "--no-new-privs",
            "--",
        ]

    def environment(self, home: Path | None = None) -> dict[str, str]:
        """The whole environment a sandboxed command gets."""
        return {
            "PATH": self.path,
            "HOME": str(home if home is not None else _home()),
            "LANG": os.environ.get("LANG") or "C.UTF-8",
            "TERM": "dumb",
            "PAGER": "cat",
            "GIT_PAGER": "cat",
        }

    def __repr__(self) -> str:
        state = "unprobed" if self._probe is None else repr(self._probe)
        return f"<Sandbox bwrap={self._bwrap!r} {state}>"


def _running_as_root() -> bool:
    """Whether bwrap would run as root here (then commands drop to another uid)."""
    return os.geteuid() == 0


def _home() -> Path:
    home = os.environ.get("HOME", "")
    return Path(home) if os.path.isabs(home) else Path("/root")


def _searchable_parents(path: Path) -> list[str]:
    """bwrap makes the missing directories above a bind target mode 0700, which the
    sandbox's uid cannot search when tiller is root: a Python under /root, or a jail
    under pytest's base directory, would be unreachable by its absolute path. Make them
    first, searchable (an existing one is left as it is)."""
    args: list[str] = []
    for above in reversed(path.parents[:-1]):
        args += ["--perms", "0755", "--dir", str(above)]
    return args


def _namespaces(binary: str, *, as_user: bool, network: bool) -> list[str]:
    """bwrap and the namespaces it makes: with a user namespace (not root), or as root
    without one, dropping to `user` later (`as_user`)."""
    if not as_user:
        args = [
            binary,
            "--unshare-all",
            # Explicit, for `--disable-userns` (as root, `--unshare-all` only tries it).
            "--unshare-user",
            "--disable-userns",
            "--cap-drop",
            "ALL",
        ]
    else:
        # Root, without a user namespace: root performs the mounts (so any host path,
        # such as a Python under /root, can be bound read-only) and `setpriv` then
        # drops to `user` before the command starts. A user namespace made by root
        # would map the command to host uid 0. No `--cap-drop`: `setpriv` needs
        # CAP_SETUID, and the uid change itself clears every capability.
        args = [binary, "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
        args += ["--unshare-cgroup-try"]
        if not network:
            args.append("--unshare-net")
    args += ["--new-session", "--die-with-parent"]
    if network and not as_user:
        args.append("--share-net")
    return args


def _host_binds(*, network: bool) -> list[str]:
    """The host's system directories, read-only; its secrets hidden; its resolver
    configuration when the network is shared."""
    args: list[str] = []
    for name in _SYSTEM_DIRS:
        args += _system_dir(Path(name))
    for name in _OPTIONAL_DIRS:
        if Path(name).is_dir():
            args += ["--ro-bind", name, name]
    # Unreadable to the sandbox's uid anyway; hidden too, should a bind ever show them.
    for secret in _SECRET_FILES:
        if Path(secret).exists():
            args += ["--ro-bind", "/dev/null", secret]
    if network:
        args += _resolver_binds()
    return args


def _hidden_homes(home: Path) -> list[str]:
    """A tmpfs over the home directory and /root."""
    args: list[str] = []
    for hidden in dict.fromkeys((home, Path("/root"))):
        if hidden != Path("/"):
            args += ["--perms", "0777", "--tmpfs", str(hidden)]
    return args


def _system_dir(path: Path) -> list[str]:
    """A system directory as the host has it: the same symlink, or a read-only bind."""
    if path.is_symlink():
        return ["--symlink", os.readlink(path), str(path)]
    if path.is_dir():
        return ["--ro-bind", str(path), str(path)]
    return []


#: The kernel's knobs under /proc, shown read-only over the sandbox's fresh /proc. bwrap
#: covers some itself, but skips those `access(W_OK)` refuses, and `/proc/sys` refuses
#: even root while its files stay writable. A missing one is skipped (`-try`).
_PROC_KNOBS: Final = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus")


def _kernel_knobs() -> list[str]:
    args: list[str] = []
    for knob in _PROC_KNOBS:
        args += ["--ro-bind-try", knob, knob]
    return args


def _git_trusts(jail: Path) -> dict[str, str]:
    """git refuses a repository owned by another uid ("dubious ownership"); the command
    runs as another uid than the root-owned workspace's, so name the workspace safe."""
    return {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "safe.directory",
        "GIT_CONFIG_VALUE_0": str(jail),
    }


def _resolver_binds() -> list[str]:
    """With the network granted, DNS must work: `/etc/resolv.conf` is often a symlink
    into `/run` (systemd-resolved), which the sandbox does not show; bind its target."""
    conf = Path("/etc/resolv.conf")
    if not conf.is_symlink():
        return []
    target = conf.resolve()
    if target.is_relative_to("/etc") or not target.exists():
        return []
    return ["--ro-bind-try", str(target), str(target)]


#: The sandbox shell commands use unless a tool is built with another.
DEFAULT_SANDBOX: Final = Sandbox()

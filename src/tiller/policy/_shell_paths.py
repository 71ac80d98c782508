"""Where a path in a shell command points, and what writing or removing it risks.

The shell risk classifier sees paths only as text, before the shell expands them. This
module sorts each one into a `PathKind` and turns "this command writes / removes that
path" into a verdict:

| kind | examples | write | remove | remove -r |
|---|---|---|---|---|
| `null` | `/dev/null`, `/dev/stderr`, `/dev/fd/3` | none | none | none |
| `inside` | `build`, `src/*.pyc`, `/ws/out` (workspace `/ws`) | file | file | file |
| `temp` | `/tmp/x`, `/var/tmp/x`, `/dev/shm/x` | file | file | file |
| `workspace` | `.`, `*`, `./*`, `.*` (all of the workspace) | file | DESTR. | DESTR. |
| `outside` | `../x`, `~/x`, `/work/other`, `/home/me/x` | file | file | DESTR. |
| `unknown` | `$DIR/x`, `$(pwd)` (known only when it runs) | file | file | DESTR. |
| `home` | `~`, `$HOME`, `/home/me`, `~/*` | file | file | DESTR. |
| `system` | `/etc/passwd`, `/usr/lib`, `/tmp` itself | system | DESTR. | DESTR. |
| `root` | `/`, `/*` | system | DESTR. | DESTR. |
| `device` | `/dev/sda`, `/dev/nvme0n1`, `/dev/mem` | DESTR. | DESTR. | DESTR. |

(file: file_mutation; system: system_install; DESTR.: destructive.)

So `rm -rf build` is a file mutation, `rm -rf ~`, `rm -rf /`, `rm -rf ..` and `rm -rf *`
are destructive, `echo hi > /etc/passwd` changes the machine (system_install: it asks even
in `full_access`, and the sandbox mounts `/etc` read-only anyway), and `dd of=/dev/sda` is
destructive. Without a known workspace every absolute path outside `/tmp` counts as
outside it: write relative paths to stay clear.
"""

from __future__ import annotations

import posixpath
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Final, Literal

from ._risk import RiskClass

__all__ = [
    "Env",
    "PathKind",
    "Verdict",
    "chdir",
    "describe",
    "path_kind",
    "remove_verdict",
    "write_verdict",
]

PathKind = Literal[
    "null", "inside", "temp", "workspace", "outside", "unknown", "home", "system", "root", "device"
]

_NULL_DEVICES: Final = frozenset(
    {"/dev/null", "/dev/stdout", "/dev/stderr", "/dev/stdin", "/dev/tty", "/dev/zero"}
)
_SYSTEM_DIRS: Final = frozenset(
    {
        "bin", "boot", "dev", "etc", "lib", "lib32", "lib64", "libx32", "media", "mnt", "opt",
        "proc", "run", "sbin", "snap", "srv", "sys", "usr", "var", "System", "Library",
        "Applications", "private",
    }
)  # fmt: skip
_HOME_PARENTS: Final = frozenset({"home", "Users"})
_GLOB_ONLY: Final = frozenset("*?[]./")
_GLOB: Final = frozenset("*?[")
_RECURSIVE_DANGER: Final = frozenset(
    {"workspace", "outside", "unknown", "home", "system", "root", "device"}
)
_REMOVE_DANGER: Final = frozenset({"workspace", "system", "root", "device"})
_DESCRIBED: Final[dict[PathKind, str]] = {
    "workspace": "the whole workspace",
    "outside": "outside the workspace",
    "unknown": "a path known only when the command runs",
    "home": "the home directory",
    "system": "a system path",
    "root": "the root of the filesystem",
    "device": "a device",
    "temp": "a temporary path",
    "inside": "in the workspace",
    "null": "a null device",
}


@dataclass(frozen=True, slots=True)
class Env:
    """Where a command runs: the absolute workspace root (if known), the directory a
    `cd` earlier in the script moved to (`cwd`, as written: `/etc`, `~`, `build`,
    `$OLDPWD`; relative paths are read from there), whether its arguments are partly read
    from input (`xargs`: targets unknown), or stand for a `find`'s results (`{}` under
    `found_under`)."""

    workspace: str | None = None
    unknown_targets: bool = False
    found_under: tuple[str, ...] | None = None
    cwd: str | None = None


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one command (or one effect of it) risks, and why in a few words; `written`
    is the path it writes or removes, as seen from the workspace root where a `cd` moved
    (for the engine's protected paths)."""

    risk: RiskClass
    reason: str
    written: str | None = None


def _glob_only(text: str) -> bool:
    return all(char in _GLOB_ONLY for char in text)


def _below_home(rest: str) -> PathKind:
    """The kind of `~<rest>`: the home itself (or everything in it), or a path under it."""
    inner = rest.strip("/")
    return "home" if _glob_only(inner) else "outside"


def _relative(path: str) -> PathKind:
    norm = posixpath.normpath(path)
    if norm == ".." or norm.startswith("../"):
        return "outside"
    if _glob_only(norm):
        return "workspace"
    return "inside"


def _absolute(norm: str) -> PathKind:
    if _glob_only(norm):
        return "root"
    if norm in _NULL_DEVICES or norm.startswith(("/dev/fd/", "/proc/self/fd/")):
        return "null"
    if norm.startswith("/dev/shm/"):
        return "temp"
    if norm.startswith("/dev/"):
        return "device"
    parts = norm.strip("/").split("/")
    if _GLOB & set(parts[0]):  # `/e*/passwd`: judge by the riskiest directory it may match
        matched = [d for d in (*_SYSTEM_DIRS, "tmp", "root") if fnmatchcase(d, parts[0])]
        if matched:
            return "system"
    if parts[0] == "tmp" or parts[:2] == ["var", "tmp"]:
        base = 1 if parts[0] == "tmp" else 2
        return "system" if _glob_only("/".join(parts[base:])) else "temp"
    if parts[0] in _HOME_PARENTS:
        if len(parts) == 1 or _glob_only("/".join(parts[1:])):
            return "system"
        return "home" if _glob_only("/".join(parts[2:])) else "outside"
    if parts[0] == "root":
        return _below_home("/".join(parts[1:]))
    if parts[0] in _SYSTEM_DIRS:
        return "system"
    return "outside"


def chdir(cwd: str | None, target: str) -> str:
    """Where `cd target` goes from `cwd` (`None`: the workspace root), as written."""
    if cwd is None or target.startswith(("/", "~", "$")):
        return target
    return posixpath.join(cwd, target)


def _from(cwd: str | None, path: str) -> str:
    """`path` as seen from the workspace root, when a `cd` moved to `cwd`."""
    if cwd is None or path.startswith(("/", "~", "$")):
        return path
    return posixpath.join(cwd, path)


def path_kind(path: str, env: Env | None = None) -> PathKind:
    """Sort `path` as written in a command run in `env` (see the module's table)."""
    env = env or _NOWHERE
    if env.found_under is not None and "{}" in path:
        under = Env(env.workspace, cwd=env.cwd)
        kinds = [path_kind(root, under) for root in env.found_under]
        kinds = ["inside" if kind == "workspace" else kind for kind in kinds]
        kinds = ["system" if kind == "root" else kind for kind in kinds]
        return max(kinds, key=_severity) if kinds else "inside"
    if not path:
        return "unknown"
    path = _from(env.cwd, path)
    for home in ("~", "$HOME", "${HOME}"):
        if path == home or path.startswith(home + "/"):
            return _below_home(path[len(home) :])
    if path.startswith("~"):  # ~user
        return "home" if "/" not in path.rstrip("/") else "outside"
    if "$" in path or "`" in path:
        return "unknown"
    if path.startswith("/"):
        norm = "/" + posixpath.normpath(path).lstrip("/")
        if env.workspace is not None:
            root = "/" + posixpath.normpath(env.workspace).strip("/")
            if norm == root or norm.startswith(root.rstrip("/") + "/"):
                return _relative(norm[len(root) :].lstrip("/") or ".")
        return _absolute(norm)
    return _relative(path)


_ORDER: Final[tuple[PathKind, ...]] = (
    "null", "inside", "temp", "workspace", "outside", "unknown", "home", "system", "root",
    "device",
)  # fmt: skip


def _severity(kind: PathKind) -> int:
    return _ORDER.index(kind)


_NOWHERE: Final = Env()


def describe(kind: PathKind) -> str:
    return _DESCRIBED[kind]


def _shown(path: str, env: Env | None) -> str:
    """`path` for a reason, with the directory a `cd` moved to when that matters."""
    if env is None or _from(env.cwd, path) == path:
        return f"`{path}`"
    return f"`{path}` (in `{env.cwd}`)"


def write_verdict(path: str, env: Env | None = None, *, verb: str = "writes") -> Verdict:
    """What writing (creating, overwriting, appending to, changing) `path` risks."""
    kind = path_kind(path, env)
    shown = _shown(path, env)
    written = _from(env.cwd if env is not None else None, path)
    if kind == "null":
        return Verdict(RiskClass.READ_ONLY, f"{verb} {shown}, which discards it")
    if kind == "device":
        return Verdict(RiskClass.DESTRUCTIVE, f"{verb} the device {shown}", written)
    if kind in ("system", "root"):
        return Verdict(RiskClass.SYSTEM_INSTALL, f"{verb} {shown}, {describe(kind)}", written)
    where = "" if kind == "inside" else f" ({describe(kind)})"
    return Verdict(RiskClass.FILE_MUTATION, f"{verb} {shown}{where}", written)


def remove_verdict(
    path: str, env: Env | None = None, *, recursive: bool, verb: str = "removes"
) -> Verdict:
    """What removing `path` (recursively or not) risks."""
    kind = path_kind(path, env)
    shown = _shown(path, env)
    written = _from(env.cwd if env is not None else None, path)
    if kind == "null":
        return Verdict(RiskClass.READ_ONLY, f"{verb} {shown}, a null device")
    danger = _RECURSIVE_DANGER if recursive else _REMOVE_DANGER
    if kind in danger:
        how = "recursively " if recursive else ""
        return Verdict(RiskClass.DESTRUCTIVE, f"{how}{verb} {shown}, {describe(kind)}", written)
    return Verdict(RiskClass.FILE_MUTATION, f"{verb} {shown}", written)

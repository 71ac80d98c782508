"""`Jail`: what one run's tools may touch and spend.

Every run carries its own jail (DESIGN §2, §11), so nothing a tool may touch is fixed on
the agent: `Jail` holds the jail root, where oversized outputs are spilled, the byte
budget a step's outputs share, and the shell timeout. It is immutable; the `with_*`
builders and `sandboxed()` return new contexts, so a run in flight keeps the policy it
started with.

`resolve()` is the one door from a path the model wrote to a path on disk. It refuses
paths no tool should open (NUL bytes, control characters, text that is not UTF-8, names
over 255 bytes, paths over 4096), resolves through symlinks and refuses anything that lands
outside the root. That is a check, not yet a guarantee: a concurrent symlink swap between
the check and the open could still redirect a tool. So the file tools then open what
`resolve()` returned through `fs` (a `JailFS`), which walks it one component at a time
from the jail's directory descriptor with `O_NOFOLLOW` (DESIGN §11).
"""

from __future__ import annotations

import functools
import os
import shutil
import tempfile
import threading
import uuid
from dataclasses import dataclass, field, fields
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any, Final

from ..errors import UsageError
from ._errors import PathOutsideJail, PathTooLong
from ._fs import PATH_MAX, JailFS, check_path_text
from ._protected import protected_match
from ._safety import LiveSafetyMode, SafetyMode
from ._walk import remove_tree

if TYPE_CHECKING:
    from ._web_access import WebAccess

__all__ = [
    "DEFAULT_OUTPUT_BUDGET_BYTES",
    "DEFAULT_SHELL_TIMEOUT",
    "PROTECTED_PATHS",
    "SPILL_SUBDIR",
    "Jail",
    "private_copy",
]

#: One step's tool outputs share this many bytes by default; the rest is spilled to files.
DEFAULT_OUTPUT_BUDGET_BYTES: Final = 64 * 1024
#: Seconds a shell command may run by default before its process group is killed.
DEFAULT_SHELL_TIMEOUT: Final = 120.0
#: Where spilled outputs go, relative to the jail root, unless a spill dir is given.
SPILL_SUBDIR: Final = Path(".tiller") / "spill"
#: Paths, relative to the jail root, that nothing the model does may write, in any mode
#: (law 11): tiller's own configuration and state, and git's internals that make a later
#: `git` run a program (`core.fsmonitor`, hooks, a `commondir` or submodule config that
#: points git elsewhere). A protected path covers everything under it. Configured hook
#: scripts and MCP server programs inside the jail are added per run (`with_protected`).
PROTECTED_PATHS: Final = (
    "tiller.toml",
    ".tiller",
    ".git/config",
    ".git/config.worktree",
    ".git/hooks",
    ".git/commondir",
    ".git/modules",
    ".git/worktrees",
)


@dataclass(init=False, frozen=True, slots=True)
class Jail:
    """Per-run tool policy: the jail root and the limits its tools work under.

    ```python
    tools = Jail("./project", shell_timeout=30)
    path = tools.resolve("src/app.py")  # absolute, real, inside ./project, or refused
    ```

    - `root`: the jail, resolved to an absolute real path; it must exist and be a directory.
    - `spill_dir`: where outputs that overflow the step's budget are written in full;
      by default `<root>/.tiller/spill`, inside the jail so the model can read them back
      with its file tools. It is created when the first output is spilled.
    - `output_budget_bytes`: the bytes one step's tool outputs share (see `OutputBudget`).
    - `shell_timeout`: the longest a shell command may run, in seconds.
    - `safety`: the run's live safety mode (`LiveSafetyMode`: a change applies to the
      next call). A new `Jail` gets its own, at `ask`; in a `RunContext` it is the
      switch of the context's `RunControls` (`ctx.controls.safety`), which the context
      rebinds its tools to (`with_safety_mode(switch)`, a cheap copy).
    - `network`: whether shell commands may use the network (the sandbox shares the host's
      network only when this is granted).
    - `unsandboxed_shell`: the user explicitly accepts running shell commands without the
      sandbox where it is unavailable (no `bwrap`, no namespaces). Off by default: then the
      shell refuses with a message saying how to install `bwrap`.
    - `protected`: paths relative to the root (POSIX spelling, no `..`) that the model may
      never write (`PROTECTED_PATHS` by default, and the run's hook scripts); see
      `protects()`.
    - `web`: where `web_fetch` may connect (`WebAccess`: public addresses only by
      default; `tiller.toml [web]` allows hosts and ranges).
    """

    root: Path
    spill_dir: Path
    output_budget_bytes: int
    shell_timeout: float
    # Live, shared and changeable: two policies are the same whatever their mode is now.
    safety: LiveSafetyMode = field(compare=False)
    network: bool
    unsandboxed_shell: bool
    protected: tuple[str, ...]
    web: WebAccess
    # A scratch jail's root is made when something first needs it (`scratch()`); shared
    # by every copy of the jail, so one `materialize()` serves them all.
    _pending: _PendingRoot | None = field(compare=False, repr=False)

    def __init__(  # noqa: PLR0913  # a public typed constructor: its keywords are the API
        self,
        root: str | os.PathLike[str],
        *,
        spill_dir: str | os.PathLike[str] | None = None,
        output_budget_bytes: int = DEFAULT_OUTPUT_BUDGET_BYTES,
        shell_timeout: float = DEFAULT_SHELL_TIMEOUT,
        safety: LiveSafetyMode | SafetyMode | None = None,
        network: bool = False,
        unsandboxed_shell: bool = False,
        protected: tuple[str, ...] = PROTECTED_PATHS,
        web: WebAccess | None = None,
        _pending: _PendingRoot | None = None,
    ) -> None:
        from ._web_access import WebAccess  # _web_access -> _tool -> _exec -> here

        if _pending is not None and not _pending.made:
            real_root = Path(root)  # already real (`scratch()`); made when first needed
        else:
            try:
                real_root = Path(root).resolve(strict=True)
            except (OSError, RuntimeError) as exc:
                raise UsageError(
                    f"the workspace {os.fspath(root)!r} does not exist: {exc}"
                ) from exc
            if not real_root.is_dir():
                raise UsageError(f"the workspace {str(real_root)!r} is not a directory")
        if output_budget_bytes < 0:
            raise UsageError("output_budget_bytes must be zero or more")
        if not shell_timeout > 0:
            raise UsageError("shell_timeout must be a positive number of seconds")
        spill = real_root / SPILL_SUBDIR if spill_dir is None else Path(spill_dir).resolve()
        if safety is None:
            safety = LiveSafetyMode()
        elif isinstance(safety, SafetyMode):
            safety = LiveSafetyMode(safety)
        object.__setattr__(self, "root", real_root)
        object.__setattr__(self, "spill_dir", spill)
        object.__setattr__(self, "output_budget_bytes", output_budget_bytes)
        object.__setattr__(self, "shell_timeout", float(shell_timeout))
        object.__setattr__(self, "safety", safety)
        object.__setattr__(self, "network", bool(network))
        object.__setattr__(self, "unsandboxed_shell", bool(unsandboxed_shell))
        object.__setattr__(self, "protected", _protected_paths(tuple(protected)))
        object.__setattr__(self, "web", WebAccess() if web is None else web)
        object.__setattr__(self, "_pending", _pending)

    @classmethod
    def scratch(cls, prefix: str = "tiller-") -> Jail:
        """A jail with the default limits over a fresh private directory in the system's
        temporary directory, made (mode 0700, as `tempfile.mkdtemp` makes it) only when
        something first needs it (`materialize()`): a run whose tools never touch the
        workspace makes no directory. Whoever made the jail ends it with
        `remove_scratch()`, which removes the directory only if the jail made it."""
        parent = _real_dir(tempfile.gettempdir())
        # 128 random bits: nobody can guess the name to plant something there first, and
        # `materialize` refuses anything already at the path (an exclusive mkdir).
        root = parent / f"{prefix}{uuid.uuid4().hex}"
        return cls(root, _pending=_PendingRoot())

    @property
    def root_pending(self) -> bool:
        """True while a scratch jail's root is not made yet (see `scratch()`)."""
        pending = self._pending
        return pending is not None and not pending.made

    def materialize(self) -> Path:
        """Make a scratch jail's root now, if it is not made yet; returns the root. A
        jail over an existing directory has nothing to make."""
        pending = self._pending
        if pending is not None and not pending.made:
            pending.make(self.root)
        return self.root

    def remove_scratch(self) -> None:
        """End a scratch jail (`scratch()`): its root is removed if this jail made it, and
        no copy of the jail makes it again (a worker thread left behind by a cancelled
        run gets a `UsageError`, not a new directory nobody removes). A root it never
        made is left alone, whatever is at that path now: in a shared temporary directory
        it may be another user's. A jail over an existing directory has nothing to end."""
        pending = self._pending
        if pending is not None and pending.close():
            remove_tree(self.root)  # iterative: the model may have nested it deep

    # ── builders ─────────────────────────────────────────────────────────────────

    def _replace(self, root: str | os.PathLike[str] | None = None, **changes: Any) -> Jail:
        fields: dict[str, Any] = {
            "spill_dir": self.spill_dir,
            "output_budget_bytes": self.output_budget_bytes,
            "shell_timeout": self.shell_timeout,
            "safety": self.safety,
            "network": self.network,
            "unsandboxed_shell": self.unsandboxed_shell,
            "protected": self.protected,
            "web": self.web,
        }
        if root is None:
            fields["_pending"] = self._pending  # the same root, made or not
        fields.update(changes)
        return Jail(self.root if root is None else root, **fields)

    def sandboxed(self, workspace: str | os.PathLike[str]) -> Jail:
        """The same policy over another jail.

        The spill dir moves to the new root's default too: a spill dir shared between
        runs would let one run (an eval case, a batch item) read another's output. The
        new jail gets its own live safety mode, starting at this one's current mode, under
        the same ceiling (a subagent's jail never loosens what its type allows).
        """
        switch = LiveSafetyMode(self.safety.mode, ceiling=self.safety.ceiling)
        return self._replace(workspace, spill_dir=None, safety=switch)

    def with_spill_dir(self, spill_dir: str | os.PathLike[str]) -> Jail:
        """The same policy, spilling to `spill_dir` (for example outside the jail, so the
        workspace stays clean; the model then cannot read spilled outputs back)."""
        return self._replace(spill_dir=spill_dir)

    def with_output_budget(self, output_budget_bytes: int) -> Jail:
        """The same policy with another per-step output budget."""
        return self._replace(output_budget_bytes=output_budget_bytes)

    def with_shell_timeout(self, shell_timeout: float) -> Jail:
        """The same policy with another shell timeout."""
        return self._replace(shell_timeout=shell_timeout)

    def with_safety_mode(self, mode: SafetyMode | LiveSafetyMode) -> Jail:
        """The same policy under another safety mode (a `LiveSafetyMode` is shared as is;
        a `SafetyMode` starts a new live one)."""
        switch = mode if isinstance(mode, LiveSafetyMode) else LiveSafetyMode(mode)
        if switch is self.safety:
            return self
        # Every other field is already checked: a copy, not a new jail (a `RunContext`
        # rebinds its tools to each derived context's own switch, so this is hot).
        copy = object.__new__(Jail)
        for name in _FIELDS:
            object.__setattr__(copy, name, switch if name == "safety" else getattr(self, name))
        return copy

    def with_network(self, granted: bool = True) -> Jail:
        """The same policy, with shell commands allowed (or not) to use the network."""
        return self._replace(network=granted)

    def with_unsandboxed_shell(self, accepted: bool = True) -> Jail:
        """The same policy, accepting (or not) an unsandboxed shell where the sandbox is
        unavailable. Only for machines where you would let the model type into your own
        terminal."""
        return self._replace(unsandboxed_shell=accepted)

    def with_web_access(self, web: WebAccess) -> Jail:
        """The same policy, with `web_fetch` allowed to connect where `web` says."""
        return self._replace(web=web)

    def with_protected(self, *paths: str | os.PathLike[str]) -> Jail:
        """The same policy, with `paths` (relative to the root, or absolute inside it;
        others are ignored: what lies outside the jail no tool can write anyway) added to
        the protected ones."""
        extra = []
        for path in paths:
            candidate = Path(path)
            if candidate.is_absolute():
                if not candidate.is_relative_to(self.root):
                    continue
                candidate = candidate.relative_to(self.root)
            extra.append(candidate.as_posix())
        return self._replace(protected=(*self.protected, *extra))

    # ── paths ────────────────────────────────────────────────────────────────────

    def protects(self, path: str | os.PathLike[str]) -> str | None:
        """The protected path that covers `path` (absolute inside the jail, or relative to
        the root), or `None`. Covered: a protected path itself and anything under it.
        Lexical only: pass what `resolve()` returned, so symlinks are already followed.
        Case-insensitive, with `.tiller/scratch` exempt (see `tiller.tools._protected`)."""
        candidate = Path(path)
        if candidate.is_absolute():
            if not candidate.is_relative_to(self.root):
                return None
            candidate = candidate.relative_to(self.root)
        return protected_match(candidate.parts, self.protected)

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real absolute path `path` names, if it lies inside the jail.

        A relative path is taken from the root; an absolute one must already point
        inside it. Symlinks are followed (a link inside the jail to a file inside it is
        fine), and the path need not exist yet (for files about to be written). Raises
        `PathOutsideJail` for anything that resolves outside the root and for a symlink
        loop; its subclass `InvalidPath` for a NUL byte, a control character or text
        that is not UTF-8, and `PathTooLong` for a name over 255 bytes or a path over
        4096 (checked before anything on disk is looked at).

        Open what it returns through `fs`, never with a plain `open()`: the walk is what
        makes the check hold against a symlink swapped in afterwards.
        """
        text = os.fspath(path)
        check_path_text(text, self.root)
        candidate = Path(text)
        if not candidate.is_absolute():
            candidate = self.root / candidate
        try:
            resolved = candidate.resolve(strict=False)
        except (OSError, RuntimeError) as exc:  # RuntimeError: a symlink loop (3.11, 3.12)
            raise PathOutsideJail(
                text, self.root, f"cannot be resolved ({exc}; a symlink loop?)"
            ) from exc
        if not resolved.is_relative_to(self.root):
            raise PathOutsideJail(text, self.root)
        size = len(os.fsencode(resolved))
        if size > PATH_MAX:
            raise PathTooLong(
                text,
                self.root,
                f"is {size} bytes long from the filesystem root, over the {PATH_MAX}-byte limit",
            )
        return resolved

    @property
    def fs(self) -> JailFS:
        """Descriptor-walked file access under this jail: open what `resolve()`
        returned through it, so a symlink swapped in after the check is refused."""
        return JailFS(self.materialize(), self.protected)

    def contains(self, path: str | os.PathLike[str]) -> bool:
        """Whether `resolve(path)` would succeed: a cheap filter for tools that walk."""
        try:
            self.resolve(path)
        except PathOutsideJail:
            return False
        return True

    def relative(self, path: str | os.PathLike[str]) -> str:
        """`path` (absolute, inside the jail) as the model should see it: relative to the
        root, with `/` separators; `.` for the root itself. A path outside the jail is
        returned unchanged."""
        p = Path(path)
        try:
            rel = p.relative_to(self.root)
        except ValueError:
            return str(p)
        return rel.as_posix() if rel.parts else "."


_FIELDS: Final = tuple(f.name for f in fields(Jail))


@functools.lru_cache(maxsize=8)
def _real_dir(path: str) -> Path:
    """The real path of the temporary directory `path`: resolved once per process (it
    names the same directory for as long as it is the temporary directory)."""
    return Path(path).resolve(strict=True)


class _PendingRoot:
    """Whether a scratch jail's root was made yet; made once, under a lock (a sync tool's
    worker thread may be the first to need it), and never after the jail was ended."""

    __slots__ = ("_closed", "_lock", "made")

    def __init__(self) -> None:
        self.made = False
        self._closed = False
        self._lock = threading.Lock()

    def make(self, root: Path) -> None:
        with self._lock:
            if self.made:
                return
            if self._closed:
                raise UsageError(
                    f"the scratch workspace {str(root)!r} was removed when its run ended"
                )
            # Exclusive: a directory (or a link) already there is not ours.
            try:
                os.mkdir(root, 0o700)
            except FileExistsError:
                raise UsageError(
                    f"the run's scratch workspace {str(root)!r} already exists and was not "
                    "made by this run, so it is not used (in a shared temporary directory "
                    "it may be another user's): give the run a workspace, or remove it"
                ) from None
            self.made = True

    def close(self) -> bool:
        """No root is made from now on; returns whether one was (then it is ours to
        remove). Under the lock: a `make` under way finishes first and is counted."""
        with self._lock:
            self._closed = True
            return self.made


@functools.lru_cache(maxsize=64)
def _protected_paths(paths: tuple[str, ...]) -> tuple[str, ...]:
    """`paths` normalised (POSIX, no `.`), each once; a `..` or an absolute path is a
    caller's mistake, refused. Cached: every jail normalises the same few sets."""
    normalised: dict[str, None] = {}
    for path in paths:
        pure = PurePosixPath(os.fspath(path))
        if pure.is_absolute() or ".." in pure.parts or not pure.parts:
            raise UsageError(
                f"protected path {os.fspath(path)!r} must be relative to the workspace "
                "root, without `..`"
            )
        normalised[pure.as_posix()] = None
    return tuple(normalised)


def private_copy(
    fixture_dir: str | os.PathLike[str], into: str | os.PathLike[str] | None = None
) -> Jail:
    """A `Jail` over a fresh private copy of `fixture_dir`, with default limits.

    For fan-out (eval cases, batch items, the demo): each run writes to its own copy, so
    runs cannot see each other's changes and the fixture stays pristine. The copy is made
    in a new temporary directory under `into` (default: the system's temp dir); removing
    it is the caller's job. Symlinks are copied as links, never followed, so a link in the
    fixture that points outside stays pointing outside, and `resolve` refuses it. A
    `.tiller` directory (old spill files) is not copied. Combine with another policy via
    `policy.sandboxed(private_copy(fixture).root)`.
    """
    source = Path(fixture_dir)
    if not source.is_dir():
        raise UsageError(f"the fixture {str(source)!r} is not a directory")
    target = Path(tempfile.mkdtemp(prefix="tiller-ws-", dir=into))
    shutil.copytree(
        source,
        target,
        symlinks=True,
        dirs_exist_ok=True,
        ignore=shutil.ignore_patterns(SPILL_SUBDIR.parts[0]),
    )
    return Jail(target)

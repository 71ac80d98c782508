"""`ToolCtx`: what one run's tools may touch and spend.

Every run carries its own jail (DESIGN §2, §11), so nothing a tool may touch is fixed on
the agent: `ToolCtx` holds the jail root, where oversized outputs are spilled, the byte
budget a turn's outputs share, and the shell timeout. It is immutable; the `with_*`
builders and `sandboxed()` return new contexts, so a run in flight keeps the policy it
started with.

`resolve()` is the one door from a path the model wrote to a path on disk. It resolves
through symlinks and refuses anything that lands outside the root. That is a check, not yet
a guarantee: a concurrent symlink swap between the check and the open could still redirect
a tool. The tools issue closes that gap by walking each path from the jail's directory
descriptor with `O_NOFOLLOW`; until then, the jail keeps honest models honest.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from ..errors import UsageError
from ._errors import PathOutsideJail

__all__ = [
    "DEFAULT_OUTPUT_BUDGET_BYTES",
    "DEFAULT_SHELL_TIMEOUT",
    "SPILL_SUBDIR",
    "ToolCtx",
    "private_copy",
]

#: One turn's tool outputs share this many bytes by default; the rest is spilled to files.
DEFAULT_OUTPUT_BUDGET_BYTES: Final = 64 * 1024
#: Seconds a shell command may run by default before its process group is killed.
DEFAULT_SHELL_TIMEOUT: Final = 120.0
#: Where spilled outputs go, relative to the jail root, unless a spill dir is given.
SPILL_SUBDIR: Final = Path(".tiller") / "spill"


@dataclass(init=False, frozen=True, slots=True)
class ToolCtx:
    """Per-run tool policy: the jail root and the limits its tools work under.

    ```python
    tools = ToolCtx("./project", shell_timeout=30)
    path = tools.resolve("src/app.py")  # absolute, real, inside ./project, or refused
    ```

    - `root`: the jail, resolved to an absolute real path; it must exist and be a directory.
    - `spill_dir`: where outputs that overflow the turn's budget are written in full;
      by default `<root>/.tiller/spill`, inside the jail so the model can read them back
      with its file tools. It is created when the first output is spilled.
    - `output_budget_bytes`: the bytes one turn's tool outputs share (see `OutputBudget`).
    - `shell_timeout`: the longest a shell command may run, in seconds.

    The tools issue adds the live safety mode and rules here.
    """

    root: Path
    spill_dir: Path
    output_budget_bytes: int
    shell_timeout: float

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        spill_dir: str | os.PathLike[str] | None = None,
        output_budget_bytes: int = DEFAULT_OUTPUT_BUDGET_BYTES,
        shell_timeout: float = DEFAULT_SHELL_TIMEOUT,
    ) -> None:
        try:
            real_root = Path(root).resolve(strict=True)
        except (OSError, RuntimeError) as exc:
            raise UsageError(f"the workspace {os.fspath(root)!r} does not exist: {exc}") from exc
        if not real_root.is_dir():
            raise UsageError(f"the workspace {str(real_root)!r} is not a directory")
        if output_budget_bytes < 0:
            raise UsageError("output_budget_bytes must be zero or more")
        if not shell_timeout > 0:
            raise UsageError("shell_timeout must be a positive number of seconds")
        spill = real_root / SPILL_SUBDIR if spill_dir is None else Path(spill_dir).resolve()
        object.__setattr__(self, "root", real_root)
        object.__setattr__(self, "spill_dir", spill)
        object.__setattr__(self, "output_budget_bytes", output_budget_bytes)
        object.__setattr__(self, "shell_timeout", float(shell_timeout))

    # ── builders ─────────────────────────────────────────────────────────────────

    def sandboxed(self, workspace: str | os.PathLike[str]) -> ToolCtx:
        """The same policy over another jail.

        The spill dir moves to the new root's default too: a spill dir shared between
        runs would let one run (an eval case, a batch item) read another's output.
        """
        return ToolCtx(
            workspace,
            output_budget_bytes=self.output_budget_bytes,
            shell_timeout=self.shell_timeout,
        )

    def with_spill_dir(self, spill_dir: str | os.PathLike[str]) -> ToolCtx:
        """The same policy, spilling to `spill_dir` (for example outside the jail, so the
        workspace stays clean; the model then cannot read spilled outputs back)."""
        return ToolCtx(
            self.root,
            spill_dir=spill_dir,
            output_budget_bytes=self.output_budget_bytes,
            shell_timeout=self.shell_timeout,
        )

    def with_output_budget(self, output_budget_bytes: int) -> ToolCtx:
        """The same policy with another per-turn output budget."""
        return ToolCtx(
            self.root,
            spill_dir=self.spill_dir,
            output_budget_bytes=output_budget_bytes,
            shell_timeout=self.shell_timeout,
        )

    def with_shell_timeout(self, shell_timeout: float) -> ToolCtx:
        """The same policy with another shell timeout."""
        return ToolCtx(
            self.root,
            spill_dir=self.spill_dir,
            output_budget_bytes=self.output_budget_bytes,
            shell_timeout=shell_timeout,
        )

    # ── paths ────────────────────────────────────────────────────────────────────

    def resolve(self, path: str | os.PathLike[str]) -> Path:
        """The real absolute path `path` names, if it lies inside the jail.

        A relative path is taken from the root; an absolute one must already point
        inside it. Symlinks are followed (a link inside the jail to a file inside it is
        fine), and the path need not exist yet (for files about to be written). Raises
        `PathOutsideJail` for anything that resolves outside the root, for a symlink loop
        and for a path with a NUL byte.
        """
        text = os.fspath(path)
        if "\x00" in text:
            raise PathOutsideJail(text, self.root, "contains a NUL byte")
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
        return resolved

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


def private_copy(
    fixture_dir: str | os.PathLike[str], into: str | os.PathLike[str] | None = None
) -> ToolCtx:
    """A `ToolCtx` over a fresh private copy of `fixture_dir`, with default limits.

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
    return ToolCtx(target)

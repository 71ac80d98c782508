"""`WorkspaceCheck`: the case's workspace as the agent left it: files that must exist,
must not, must contain a text or match a pattern, and a command (the fixture's own
tests, say) run in the case's sandbox that must exit 0."""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Final

import regex

from ..errors import UsageError
from ..tools import (
    DEFAULT_SANDBOX,
    Sandbox,
    SandboxUnavailable,
    decode_output,
    describe_exit,
    spawn,
)
from ._outcome import CaseOutcome
from ._score import Score
from ._scorer_support import check_scorer_name, quote, scorer_error

__all__ = ["WorkspaceCheck"]

#: The newest output of the command kept while it runs; the explanation shows its tail.
_OUTPUT_BYTES: Final = 64 * 1024
#: How much of the output's end the explanation shows.
_TAIL_LINES: Final = 20
_TAIL_CHARS: Final = 2000
#: The largest file `contains` and `matches` read (a bigger one fails its check).
_MAX_READ_BYTES: Final = 16 * 1024 * 1024
#: How long one pattern may take on one file.
_MATCH_SECONDS: Final = 5.0


@dataclass(frozen=True, slots=True)
class _Check:
    passed: bool
    says: str


class WorkspaceCheck:
    """Scores the workspace (`outcome.workspace`) against what must hold there; the value
    is the fraction of checks that hold, a pass when all do.

    - `exists`, `absent`: paths relative to the workspace that must (not) exist.
    - `contains`: `{path: text}`, the file must contain the text.
    - `matches`: `{path: pattern}`, a `regex` pattern the file's text must match
      somewhere (compiled here: one that does not compile is a `UsageError`).
    - `command`: a shell command run with `bash -c` in the workspace *inside the case's
      sandbox* (`sandbox`, tiller's bubblewrap jail, as the shell tool runs commands:
      the workspace read-write, the rest of the host hidden or read-only, no network
      unless `network=True`), after the agent finished. Exit 0 holds; the tail of its
      output is in the explanation. It is killed after `timeout` seconds, which fails
      the check. To run a Python inside, pass `Sandbox(ro_binds=Sandbox.python_paths())`.
      Where the sandbox is unavailable the score is an error (it never runs unsandboxed).

    A path that leads outside the workspace (through a symlink the agent made) fails its
    check. An outcome without a workspace, or whose workspace is gone, is an error score.
    The command judges whatever the agent left, tests included: run the fixture's
    pristine tests (copied from outside the workspace) if the agent may have edited them.
    """

    __slots__ = (
        "_patterns",
        "absent",
        "command",
        "contains",
        "exists",
        "matches",
        "name",
        "network",
        "sandbox",
        "timeout",
    )

    def __init__(  # noqa: PLR0913  # a public typed constructor: its keywords are the API
        self,
        *,
        exists: Sequence[str] = (),
        absent: Sequence[str] = (),
        contains: Mapping[str, str] | None = None,
        matches: Mapping[str, str] | None = None,
        command: str | None = None,
        timeout: float = 300.0,
        network: bool = False,
        sandbox: Sandbox = DEFAULT_SANDBOX,
        name: str = "workspace",
    ) -> None:
        self.exists = tuple(_relative(p, "exists") for p in _paths(exists, "exists"))
        self.absent = tuple(_relative(p, "absent") for p in _paths(absent, "absent"))
        self.contains = {_relative(p, "contains"): t for p, t in _texts(contains, "contains")}
        self.matches = {_relative(p, "matches"): t for p, t in _texts(matches, "matches")}
        self._patterns: dict[str, regex.Pattern[str]] = {}
        for path, pattern in self.matches.items():
            try:
                self._patterns[path] = regex.compile(pattern)
            except regex.error as exc:
                raise UsageError(
                    f"WorkspaceCheck(matches=): the pattern {pattern!r} for {path!r} does "
                    f"not compile: {exc}"
                ) from exc
        if command is not None and (not isinstance(command, str) or not command.strip()):
            raise UsageError(f"WorkspaceCheck(command=) is a shell command, not {command!r}")
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise UsageError(f"WorkspaceCheck(timeout=) is a positive number, not {timeout!r}")
        if not (self.exists or self.absent or self.contains or self.matches or command):
            raise UsageError(
                "WorkspaceCheck has nothing to check: give exists=, absent=, contains=, "
                "matches= or command="
            )
        self.command = command
        self.timeout = float(timeout)
        self.network = network
        self.sandbox = sandbox
        self.name = check_scorer_name(name)

    async def score(self, outcome: CaseOutcome) -> Score:
        if outcome.workspace is None:
            return scorer_error(
                f"case {outcome.case.id!r}'s outcome has no workspace (its files were not "
                f"kept), and the {self.name!r} scorer looks at the workspace"
            )
        root = await asyncio.to_thread(_real_directory, outcome.workspace)
        if root is None:
            return scorer_error(
                f"case {outcome.case.id!r}'s workspace {str(outcome.workspace)!r} is not a "
                "directory (anymore): nothing to look at"
            )
        # File checks first, before the command can change the files.
        checks = await asyncio.to_thread(self._file_checks, root)
        if self.command is not None:
            try:
                checks.append(await self._run_command(root, self.command))
            except SandboxUnavailable as exc:
                return scorer_error(f"the {self.name!r} scorer's command cannot run: {exc}")
        held = sum(c.passed for c in checks)
        says = "; ".join(c.says for c in checks)
        if held == len(checks):
            return Score(1.0, f"all {len(checks)} checks hold: {says}")
        failing = "; ".join(c.says for c in checks if not c.passed)
        return Score(
            held / len(checks),
            f"{held} of {len(checks)} checks hold; failing: {failing}",
            passed=False,
        )

    def _file_checks(self, root: Path) -> list[_Check]:
        checks = []
        for rel in self.exists:
            path = _inside(root, rel)
            if path is None:
                checks.append(_Check(False, f"{rel} leads outside the workspace"))
            else:
                found = path.exists()
                checks.append(_Check(found, f"{rel} exists" if found else f"{rel} is missing"))
        for rel in self.absent:
            # The directory it would be in, links resolved (one out of the workspace fails,
            # as for every check); the entry itself is not followed: a link there, even
            # dangling, is something the agent left.
            parent, name = posixpath.split(rel)
            directory = _inside(root, parent) if parent else root
            if directory is None:
                checks.append(_Check(False, f"{rel} leads outside the workspace"))
                continue
            there = os.path.lexists(directory / name)
            checks.append(_Check(not there, f"{rel} exists" if there else f"{rel} is absent"))
        for rel, text in self.contains.items():
            checks.append(self._read_check(root, rel, text, None))
        for rel, pattern in self._patterns.items():
            checks.append(self._read_check(root, rel, None, pattern))
        return checks

    def _read_check(
        self, root: Path, rel: str, text: str | None, pattern: regex.Pattern[str] | None
    ) -> _Check:
        path = _inside(root, rel)
        if path is None:
            return _Check(False, f"{rel} leads outside the workspace")
        try:
            info = path.stat()
            if not stat.S_ISREG(info.st_mode):
                # A FIFO the agent left would block the read for ever; a device, worse.
                return _Check(False, f"{rel} is not a regular file: not read")
            if info.st_size > _MAX_READ_BYTES:
                return _Check(False, f"{rel} is over {_MAX_READ_BYTES} bytes: not read")
            content = path.read_bytes().decode("utf-8", errors="replace")
        except OSError as exc:
            return _Check(False, f"{rel} cannot be read ({exc.strerror or exc})")
        if text is not None:
            found = text in content
            verb = "contains" if found else "does not contain"
            return _Check(found, f"{rel} {verb} {quote(text)}")
        assert pattern is not None
        try:
            matched = pattern.search(content, timeout=_MATCH_SECONDS) is not None
        except TimeoutError:
            return _Check(False, f"/{pattern.pattern}/ took over {_MATCH_SECONDS:g}s on {rel}")
        verb = "matches" if matched else "does not match"
        return _Check(matched, f"{rel} {verb} /{pattern.pattern}/")

    async def _run_command(self, root: Path, command: str) -> _Check:
        await self.sandbox.require()
        # Off the loop: as root, building the command grants the workspace to the
        # sandbox's uid, a walk of the whole tree.
        argv = await asyncio.to_thread(
            self.sandbox.command, ["bash", "-c", command], jail=root, network=self.network
        )
        process = await spawn(
            argv, cwd=root, env=self.sandbox.environment(), output_limit=_OUTPUT_BYTES
        )
        try:
            # `wait`, not a timeout around `await process.exited`: cancelling that await
            # would cancel the future itself, which the cleanup below waits on.
            await asyncio.wait([process.exited], timeout=self.timeout)
            timed_out = not process.exited.done()
        finally:
            # Also after a normal exit: whatever the command left running goes too.
            await process.aclose()
        data, start = process.output.since(0)
        tail = _tail(decode_output(data, cut=start > 0))
        shown = f"`{command}`"
        if timed_out:
            return _Check(False, f"{shown} timed out after {self.timeout:g}s{tail}")
        code = process.returncode
        return _Check(code == 0, f"{shown} ended with {describe_exit(code)}{tail}")


def _paths(value: object, option: str) -> Sequence[object]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise UsageError(f"WorkspaceCheck({option}=) is a list of paths, not {value!r}")
    return value


def _texts(value: object, option: str) -> list[tuple[object, str]]:
    if value is None:
        return []
    if not isinstance(value, Mapping) or not all(isinstance(t, str) for t in value.values()):
        raise UsageError(f"WorkspaceCheck({option}=) maps paths to strings, not {value!r}")
    return list(value.items())


def _relative(path: object, option: str) -> str:
    """`path` if it names a place inside a workspace (relative, no `..`), else
    `UsageError`."""
    if not isinstance(path, str | os.PathLike):
        raise UsageError(f"WorkspaceCheck({option}=): a path is a string, not {path!r}")
    text = os.fspath(path)
    pure = PurePosixPath(text)
    if not text or pure.is_absolute() or ".." in pure.parts or pure == PurePosixPath("."):
        raise UsageError(
            f"WorkspaceCheck({option}=): {text!r} must be a path inside the workspace, "
            "relative to it, without '..'"
        )
    return pure.as_posix()


def _real_directory(path: Path) -> Path | None:
    """`path` with its symlinks resolved, if it is a directory (the sandbox binds the
    real path)."""
    real = Path(os.path.realpath(path))
    return real if real.is_dir() else None


def _inside(root: Path, rel: str) -> Path | None:
    """`root/rel` with its symlinks resolved, or None when they lead outside `root`."""
    with contextlib.suppress(OSError, RuntimeError):
        real = Path(os.path.realpath(root / rel))
        if real.is_relative_to(root):
            return real
    return None


def _tail(output: str) -> str:
    """The end of the command's output for the explanation, after a colon; "" if none."""
    text = output.rstrip()
    if not text:
        return " (no output)"
    lines = text.splitlines()[-_TAIL_LINES:]
    shown = "\n".join(lines)[-_TAIL_CHARS:]
    return f"; output ends:\n{shown}"

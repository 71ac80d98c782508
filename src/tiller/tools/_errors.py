"""Errors of the tools package, under tiller's one root.

```
TillerError
├── UsageError
│   ├── DuplicateTool          a registry already holds a tool of that name
│   └── ToolDefinitionError    a function cannot be turned into a tool (the message says why)
└── PathOutsideJail            a path a tool was given resolves outside the run's jail
    ├── InvalidPath            not a usable path: a NUL byte, a control character, not UTF-8
    │   └── PathTooLong        a name over NAME_MAX (255 bytes) or a path over PATH_MAX (4096)
    ├── SymlinkRefused         a component was a symlink when the tool opened it (swapped in
    │                          after the check): the descriptor walk refuses to follow it
    ├── HardLinkRefused        a file with more than one link: its other name may lie outside
    └── ProtectedPathRefused   a write to protected policy (`tiller.toml`, `.tiller/`, git's
                               config and hooks, the run's hook scripts), in every mode
```

All of them are refusals of the jail, so code that handles `PathOutsideJail` (the registry
turns it into an error result the model reads) handles them too.

`ToolError` (in `tiller.tools`) is deliberately *not* here: it is a signal a tool raises on
purpose ("this call failed, tell the model why"), so it is a plain `Exception` and
`except TillerError` never swallows it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from ..errors import TillerError, UsageError

__all__ = [
    "DuplicateTool",
    "HardLinkRefused",
    "InvalidPath",
    "PathOutsideJail",
    "PathTooLong",
    "ProtectedPathRefused",
    "SymlinkRefused",
    "ToolDefinitionError",
]

#: How much of a path a refusal quotes; a 4 KiB path would drown the message.
_SHOWN_CHARS: Final = 200


class DuplicateTool(UsageError):
    """Two tools share a name. The model addresses tools by name only, so a registry
    refuses the second one; rename it (`@tool(name=...)`) or drop one of them."""

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a tool named {name!r} is already registered; "
            "give one of them another name with @tool(name=...)"
        )
        self.name = name


class ToolDefinitionError(UsageError):
    """A function cannot become a tool: an unannotated or variadic parameter, a type
    pydantic cannot describe as JSON Schema, a name providers reject, no description.

    Raised when the tool is defined (at import time), never while a run is going on.
    """


class PathOutsideJail(TillerError):
    """A path resolves outside the run's workspace jail (`..`, an absolute path elsewhere,
    a symlink that points out), or is not a usable path at all.

    The message is written for the model, which gave the path: it names the path and says
    what to do instead (by default: stay inside the workspace). `path` is the path as
    given, `root` the jail, `reason` what is wrong with it.
    """

    def __init__(
        self,
        path: str,
        root: Path,
        reason: str = "is outside the workspace",
        *,
        advice: str | None = None,
    ) -> None:
        if advice is None:
            advice = (
                f"tools may only touch files inside the workspace ({root}). "
                "Use a path relative to the workspace root."
            )
        shown = path if len(path) <= _SHOWN_CHARS else path[: _SHOWN_CHARS - 20] + "…" + path[-19:]
        super().__init__(f"path {shown!r} {reason}; {advice}")
        self.path = path
        self.root = root
        self.reason = reason


class InvalidPath(PathOutsideJail):
    """A path no file tool will open whatever it points at: it holds a NUL byte, a control
    character (newline, escape, ...), or text that is not valid UTF-8 (lone surrogates).

    Such names are how terminal injection and truncation tricks get in; the workspace's own
    files never need them. Odd but printable Unicode (right-to-left marks, fullwidth dots)
    is not refused: it is a literal name, which cannot leave the jail.
    """

    def __init__(self, path: str, root: Path, reason: str) -> None:
        super().__init__(
            path,
            root,
            reason,
            advice="name files with printable UTF-8 text, relative to the workspace root.",
        )


class PathTooLong(InvalidPath):
    """One name of the path is over `NAME_MAX` (255 bytes), or the whole path over
    `PATH_MAX` (4096 bytes). Refused up front with a clear message instead of surfacing
    as a raw `ENAMETOOLONG` from deep inside a walk."""


class SymlinkRefused(PathOutsideJail):
    """A component of the path was a symlink when the tool opened it, although the path
    had been resolved through every symlink just before: something swapped it in between
    the check and the open. The descriptor walk opens every component with `O_NOFOLLOW`,
    so it refuses instead of following the link wherever it leads."""

    def __init__(self, path: str, root: Path, component: str) -> None:
        super().__init__(
            path,
            root,
            f"changed while the tool opened it: {component!r} became a symlink",
            advice="the tool refuses to follow it. Check the path (list_dir) and try again.",
        )
        self.component = component


class HardLinkRefused(PathOutsideJail):
    """A regular file with more than one hard link. Its other names may lie outside the
    jail (a hard link is the same file, not a pointer to it), so the file tools neither
    read nor write it."""

    def __init__(self, path: str, root: Path, links: int) -> None:
        super().__init__(
            path,
            root,
            f"is a file with {links} hard links, and another of its names may lie outside "
            "the workspace",
            advice="file tools refuse hard-linked files; ask the user to replace the link "
            "with a copy.",
        )
        self.links = links


class ProtectedPathRefused(PathOutsideJail):
    """A write, move or delete whose target is protected policy (`Jail.protected`:
    `tiller.toml`, `.tiller/`, git's config and hooks, the run's hook scripts). Refused in
    every safety mode, `full_access` included (law 11): what the model writes must never
    change who decides or run on the host. `protected` is the protected path that covers
    the target."""

    def __init__(self, path: str, root: Path, protected: str) -> None:
        super().__init__(
            path,
            root,
            f"is protected policy (covered by {protected!r}): the model may not write, move "
            "or delete it in any mode",
            advice="a person edits it between runs. Leave it as it is and carry on with "
            "the task, or tell the user what change it needs.",
        )
        self.protected = protected

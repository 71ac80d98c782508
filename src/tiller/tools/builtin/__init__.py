"""The built-in coding tools: read, write, edit, list, search, and a shell.

`coding_tools()` is the set the built-in coding agent uses. Every file tool stays inside the
run's jail (`ToolCtx.resolve`). The shell is **not sandboxed yet** (see `run_shell`); the
tools issue hardens all of them (an `O_NOFOLLOW` walk from the jail's descriptor, bwrap,
file checkpoints).
"""

from __future__ import annotations

from .._tool import Tool
from ._files import edit_file, list_dir, read_file, write_file
from ._search import search
from ._shell import run_shell

__all__ = [
    "coding_tools",
    "edit_file",
    "list_dir",
    "read_file",
    "run_shell",
    "search",
    "write_file",
]


def coding_tools() -> list[Tool]:
    """The built-in coding tools, read-only ones first: read_file, list_dir, search,
    write_file, edit_file, run_shell. A new list each time, to extend freely."""
    return [read_file, list_dir, search, write_file, edit_file, run_shell]

"""Helpers for the file tool tests: running them through a registry as the loop does, a
snapshotter double, and a fingerprint of a directory tree to prove nothing changed."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from tiller.conversation import ToolCall
from tiller.tools import CheckpointOrigin, ExecContext, Execution, Registry, Tool
from tiller.tools.builtin import apply_patch, edit_file, glob, grep, list_dir, read_file, write_file

FILE_TOOLS: tuple[Tool, ...] = (
    read_file,
    list_dir,
    glob,
    grep,
    write_file,
    edit_file,
    apply_patch,
)


async def run(ctx: ExecContext, name: str, **args: Any) -> Execution:
    """One call of a file tool through a registry, as the loop makes it."""
    call = ToolCall(id="call-1", name=name, arguments=orjson.dumps(args).decode())
    return await Registry(FILE_TOOLS).execute(call, ctx)


class RecordingSnapshots:
    """A `FileSnapshotter` that records what it was asked to snapshot, and what the files
    held then (to prove the snapshot came before the write); or fails, if told to."""

    def __init__(self, *, fail: bool = False) -> None:
        self.fail = fail
        self.calls: list[tuple[list[Path], dict[Path, bytes | None], str]] = []

    async def snapshot(
        self, origin: CheckpointOrigin, root: Path, paths: Sequence[Path], *, reason: str
    ) -> str:
        if self.fail:
            raise RuntimeError("the checkpoint store is down")
        held = {p: (p.read_bytes() if p.is_file() else None) for p in paths}
        self.calls.append((list(paths), held, reason))
        return f"cp-{len(self.calls)}"


def fingerprint(top: Path) -> dict[str, tuple[str, bytes | str | None, int]]:
    """Everything under `top`, not following symlinks: each entry's kind, content (a
    file's bytes, a link's target) and permission bits. Equal before and after means
    nothing there was created, changed, removed or re-permissioned."""
    found: dict[str, tuple[str, bytes | str | None, int]] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            path = Path(dirpath, name)
            st = path.lstat()
            rel = path.relative_to(top).as_posix()
            if stat.S_ISLNK(st.st_mode):
                found[rel] = ("link", os.readlink(path), 0)
            elif stat.S_ISDIR(st.st_mode):
                found[rel] = ("dir", None, stat.S_IMODE(st.st_mode))
            else:
                found[rel] = ("file", path.read_bytes(), stat.S_IMODE(st.st_mode))
    return found

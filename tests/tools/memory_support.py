"""Helpers for the memory-bound tests: run one built-in tool in a fresh child Python and
read that child's peak resident memory, so the bound measured is the tool's, not the test
runner's; and build and remove directory chains too deep for recursive code."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import tiller

#: The peak RSS a tool call may reach, whatever the file or output it meets.
RSS_BOUND_MIB = 200

_CHILD = textwrap.dedent(
    """
    import asyncio, json, resource, sys
    import orjson
    from tiller.conversation import ToolCall
    from tiller.tools import ExecContext, Registry, coding_tools

    root, name, args = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

    async def main():
        ctx = ExecContext.for_test(root)
        call = ToolCall(id="call-1", name=name, arguments=orjson.dumps(args).decode())
        done = await Registry(coding_tools()).execute(call, ctx)
        return done

    done = asyncio.run(main())
    text = done.result.content
    # VmHWM, not ru_maxrss: Linux carries the forking parent's peak (the test runner's)
    # into ru_maxrss across exec, while VmHWM belongs to this process image alone.
    status = open('/proc/self/status').read().splitlines()
    peak_kib = int(next(l for l in status if l.startswith('VmHWM')).split()[1])
    print(json.dumps({"peak_mib": peak_kib / 1024, "text": text,
                      "is_error": done.result.is_error}))
    """
)


def run_in_child(root: Path, name: str, **args: Any) -> dict[str, Any]:
    """Run tool `name` once over the jail `root` in a child process; its peak RSS in MiB
    (`peak_mib`), the result's text and whether it is an error."""
    env = {**os.environ, "PYTHONPATH": str(Path(tiller.__file__).parents[1])}
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), name, json.dumps(args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def make_chain(top: Path, depth: int, name: str = "d") -> None:
    """A chain of `depth` nested directories `name` under `top`, made through directory
    descriptors (the path itself would pass PATH_MAX)."""
    fd = os.open(top, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for _ in range(depth):
            os.mkdir(name, dir_fd=fd)
            child = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = child
        with open(os.open("leaf.txt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write("needle at the bottom\\n")
    finally:
        os.close(fd)


def remove_tree(top: Path) -> None:
    """Remove everything under `top` (and `top`), iteratively, by directory descriptors,
    never following a symlink: pytest's own cleanup recurses and fails on deep chains."""
    if not top.exists():
        return
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    stack = [os.open(top, flags)]
    names: list[str] = []
    try:
        while stack:
            fd = stack[-1]
            with os.scandir(fd) as scan:
                entries = [(e.name, e.is_dir(follow_symlinks=False)) for e in scan]
            subdir = next((n for n, is_dir in entries if is_dir), None)
            for entry_name, is_dir in entries:
                if not is_dir:
                    os.unlink(entry_name, dir_fd=fd)
            if subdir is not None:
                stack.append(os.open(subdir, flags, dir_fd=fd))
                names.append(subdir)
                continue
            os.close(stack.pop())
            if names:
                os.rmdir(names.pop(), dir_fd=stack[-1])
    finally:
        for fd in stack:
            os.close(fd)
    top.rmdir()

"""Running the real `tiller` command in a child process, for tests that need what a
person gets: a fresh interpreter, no terminal, the package's own entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path


def tiller(
    *args: str, cwd: Path | None = None, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m tiller ARGS` with no standard input, its output captured as text;
    `env` is added to (or, with an empty value, removed from) this process's environment."""
    environ = dict(os.environ)
    for name, value in (env or {}).items():
        if value:
            environ[name] = value
        else:
            environ.pop(name, None)
    return subprocess.run(
        [sys.executable, "-m", "tiller", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
        env=environ,
    )


def made_store(path: Path) -> str:
    """The URL of an empty tiller store made at `path` (the reading commands refuse a
    SQLite store that is not there, and a file that is not one)."""
    import asyncio

    from tiller.store import open_bus

    url = f"sqlite:///{path}"

    async def make() -> None:
        async with await open_bus(url):
            pass

    asyncio.run(make())
    return url

"""Running the real `tiller` command in a child process, for tests that need what a
person gets: a fresh interpreter, no terminal, the package's own entry point."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def tiller(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`python -m tiller ARGS` with no standard input, its output captured as text."""
    return subprocess.run(
        [sys.executable, "-m", "tiller", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        stdin=subprocess.DEVNULL,
        cwd=cwd,
    )

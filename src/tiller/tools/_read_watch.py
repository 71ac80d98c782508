"""`watching_reads`: which workspace files one tool call opened for reading.

A run inherits the taint of a file an earlier tainted run wrote when it reads it
(`TaintIndex`), so the loop needs to know what a call read; the file tools need not
know anything about taint. Every read goes through `JailFS`, which reports the
workspace-relative path to the watcher of the calling task (a `ContextVar`: set by the
loop around one call, copied into the worker thread a sync tool runs in, invisible to
every other task, so concurrent calls and concurrent runs never see each other's reads).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from contextvars import ContextVar, Token
from typing import Final

__all__ = ["note_read", "stop_watching_reads", "watch_reads", "watching_reads"]

ReadWatcher = Callable[[str], None]

_WATCHER: Final[ContextVar[ReadWatcher | None]] = ContextVar("tiller_read_watcher", default=None)


@contextlib.contextmanager
def watching_reads(watcher: ReadWatcher | None) -> Iterator[None]:
    """Within the block, `watcher(path)` hears of every file `JailFS` opens for reading
    (`None`: nobody listens)."""
    reset = _WATCHER.set(watcher)
    try:
        yield
    finally:
        _WATCHER.reset(reset)


def watch_reads(watcher: ReadWatcher | None) -> Token[ReadWatcher | None]:
    """`watching_reads` without the context manager (the loop's per-call path): pass
    the token to `stop_watching_reads`."""
    return _WATCHER.set(watcher)


def stop_watching_reads(token: Token[ReadWatcher | None]) -> None:
    _WATCHER.reset(token)


def note_read(path: str) -> None:
    """`JailFS` opened the workspace file `path` (relative, POSIX) for reading."""
    watcher = _WATCHER.get()
    if watcher is not None:
        watcher(path)

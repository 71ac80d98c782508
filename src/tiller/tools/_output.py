"""Output capping: one byte budget per step, the overflow spilled to files.

A model's context is the scarcest thing a run has, and one `cat` of a log can eat it. So
the tool outputs of one step share one byte budget (`Jail.output_budget_bytes`): a
result keeps what still fits, and the whole output goes to a file in the run's spill
dir, with a pointer line where the tail was cut. Nothing is lost; the model can read the
rest with its file tools, a page at a time.

The budget is consumed first come, first served. Cap the results of a batch in call order
(after the calls ran concurrently) and the transcript is the same whichever call finished
first.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Final

from ..conversation import ToolResult
from ..errors import UsageError
from ._errors import PathOutsideJail
from ._fs import JailFS
from ._jail import Jail

__all__ = ["OutputBudget", "recorded_head"]

_UNSAFE: Final = re.compile(r"[^A-Za-z0-9._-]")
_NEW_FILE: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class OutputBudget:
    """The bytes one step's tool outputs may still use.

    Safe to share between the concurrent calls of a step, on the loop or in worker
    threads: the charge is taken under a lock, and the spill file is written outside it.
    """

    __slots__ = ("_limit", "_lock", "_remaining")

    def __init__(self, limit: int) -> None:
        if limit < 0:
            raise UsageError("an output budget cannot be negative")
        self._limit = limit
        self._remaining = limit
        self._lock = threading.Lock()

    @classmethod
    def for_turn(cls, jail: Jail) -> OutputBudget:
        """A fresh budget for one step, sized by the run's tool policy."""
        return cls(jail.output_budget_bytes)

    @property
    def limit(self) -> int:
        return self._limit

    @property
    def remaining(self) -> int:
        """Bytes not yet used by this step's outputs."""
        return self._remaining

    def _take(self, size: int) -> int:
        """Charge up to `size` bytes; return how many were granted."""
        with self._lock:
            granted = min(size, self._remaining)
            self._remaining -= granted
            return granted

    def cap(
        self,
        content: str,
        call_id: str,
        spill_dir: Path,
        *,
        relative_to: Path | None = None,
        prepare: Callable[[], object] | None = None,
    ) -> str:
        """`content` if it fits the remaining budget; else the part that fits, then a
        pointer line to a spill file holding the whole of `content`.

        The pointer reads `[output truncated: N bytes more in <path>]`, where N counts the
        bytes not shown and the path is relative to `relative_to` (the jail root, so the
        model can pass it to `read_file`) when the file lies under it. The cut never splits
        a UTF-8 character. The spill file is named after the call id; `spill_dir` is created
        if needed, after `prepare()` (which may make the directory it lies in).
        """
        data = content.encode("utf-8")
        granted = self._take(len(data))
        if granted == len(data):
            return content
        kept = _utf8_prefix(data, granted)
        head = kept.decode("utf-8")
        separator = "" if not head or head.endswith("\n") else "\n"
        more = len(data) - len(kept)
        try:
            if prepare is not None:
                prepare()  # a scratch jail's root, made only now that a spill needs it
            spill_file = _write_spill(spill_dir, call_id, data, relative_to)
        except (OSError, PathOutsideJail) as exc:
            # A spill dir a command replaced with a symlink, a full disk: the result is
            # still capped, and says the rest is lost rather than failing the call.
            reason = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            return f"{head}{separator}[output truncated: {more} bytes more, not saved: {reason}]"
        shown: str | Path = spill_file
        if relative_to is not None and spill_file.is_relative_to(relative_to):
            shown = spill_file.relative_to(relative_to).as_posix()
        return f"{head}{separator}[output truncated: {more} bytes more in {shown}]"

    def cap_result(self, result: ToolResult, jail: Jail) -> ToolResult:
        """`result` with its content capped (see `cap`), spilling to the run's spill dir."""
        capped = self.cap(
            result.content,
            result.call_id,
            jail.spill_dir,
            relative_to=jail.root,
            prepare=jail.materialize,
        )
        if capped is result.content:
            return result
        return result.model_copy(update={"content": capped})

    def __repr__(self) -> str:
        return f"<OutputBudget {self._remaining}/{self._limit} bytes left>"


def recorded_head(content: str, limit: int) -> str:
    """`content` as a durable call record keeps it: whole if it fits `limit` bytes (a
    result never reaches the transcript longer than one step's budget), else the head
    that fits and a line saying how much was not recorded. The record only answers the
    call on a resume after a crash; the transcript's own cap spills the whole."""
    data = content.encode("utf-8")
    if len(data) <= limit:
        return content
    head = _utf8_prefix(data, limit).decode("utf-8")
    separator = "" if not head or head.endswith("\n") else "\n"
    return f"{head}{separator}[{len(data) - len(head.encode())} bytes more were not recorded]"


def _utf8_prefix(data: bytes, size: int) -> bytes:
    """The longest prefix of `data` no longer than `size` that ends on a character boundary."""
    end = size
    # Back up over continuation bytes (0b10xxxxxx) to the start of the cut character.
    while 0 < end < len(data) and (data[end] & 0xC0) == 0x80:
        end -= 1
    return data[:end]


def _write_spill(spill_dir: Path, call_id: str, data: bytes, jail: Path | None) -> Path:
    """Write `data` to a new file named after the call; never overwrite an earlier spill.
    A spill dir inside the jail is reached by the jail's descriptor walk and the file made
    with `O_EXCL | O_NOFOLLOW`, so a symlink a command planted there cannot redirect the
    write out of the jail."""
    stem = _UNSAFE.sub("_", call_id)[:100] or "call"
    with _spill_dir_fd(spill_dir, jail) as dir_fd:
        suffix = 0
        while True:
            name = f"{stem}.txt" if suffix == 0 else f"{stem}-{suffix}.txt"
            try:
                fd = os.open(name, _NEW_FILE, 0o600, dir_fd=dir_fd)
            except FileExistsError:
                suffix += 1
                continue
            with os.fdopen(fd, "wb") as file:
                file.write(data)
            return spill_dir / name


@contextmanager
def _spill_dir_fd(spill_dir: Path, jail: Path | None) -> Iterator[int]:
    if jail is not None and spill_dir.is_relative_to(jail):
        with JailFS(jail).open_dir(spill_dir, create=True) as fd:
            yield fd
        return
    spill_dir.mkdir(parents=True, exist_ok=True)
    fd = os.open(spill_dir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    try:
        yield fd
    finally:
        os.close(fd)

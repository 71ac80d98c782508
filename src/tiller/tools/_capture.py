"""`OutputCapture`: a foreground command's output, kept bounded however much it prints.

The result the model gets, and the call record the store keeps, hold the first
`HEAD_BYTES` and the last `TAIL_BYTES` of the output with a marker between them; the
whole output goes to a spill file (`SpillFile`) that the marker names, so the model can
read any range of it. Output that fits in head and tail never touches the disk. Memory
stays at head plus tail plus one pipe read, whether the command prints a kilobyte or
`yes` for the whole timeout.
"""

from __future__ import annotations

import logging
from typing import Final

from ._errors import PathOutsideJail
from ._jail import Jail
from ._process import OutputLog, decode_output
from ._spill import SPILL_DIR_BYTES, SpillFile

__all__ = ["HEAD_BYTES", "TAIL_BYTES", "OutputCapture"]

#: Bytes of the start of a command's output the result keeps.
HEAD_BYTES: Final = 16 * 1024
#: Bytes of the end of a command's output the result keeps.
TAIL_BYTES: Final = 32 * 1024

_logger: Final = logging.getLogger(__name__)


class OutputCapture:
    """Called with each chunk of a command's output (on the event loop); `render()`
    gives the bounded text for the result."""

    __slots__ = ("_call_id", "_failed", "_head", "_jail", "_spill", "_tail", "total")

    def __init__(self, jail: Jail, call_id: str) -> None:
        self._jail = jail
        self._call_id = call_id
        self._head = bytearray()
        self._tail = OutputLog(TAIL_BYTES)
        self._spill: SpillFile | None = None
        self._failed: str | None = None
        self.total = 0

    def __call__(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = HEAD_BYTES - len(self._head)
        if room > 0:
            self._head += chunk[:room]
            chunk = chunk[room:]
        if self._spill is None and self._failed is None and self.total > HEAD_BYTES + TAIL_BYTES:
            self._start_spill()
        if self._spill is not None:
            self._spill.write(chunk)
        self._tail.add(chunk)

    def _start_spill(self) -> None:
        """Open the spill file and write what came so far: the head, then the tail
        (nothing was dropped yet: the output fits both until now)."""
        try:
            self._spill = SpillFile(self._jail, self._call_id)
        except (OSError, PathOutsideJail) as exc:
            # A spill dir that cannot be made (a planted symlink, a full disk): the
            # result still keeps head and tail, and says the rest was not saved.
            self._failed = (exc.strerror if isinstance(exc, OSError) else None) or str(exc)
            _logger.warning("cannot spill the output of %s: %s", self._call_id, exc)
            return
        self._spill.write(bytes(self._head))
        data, _ = self._tail.since(0)
        self._spill.write(data)

    def close(self) -> None:
        if self._spill is not None:
            self._spill.close()

    @property
    def spill(self) -> SpillFile | None:
        return self._spill

    def render(self) -> str:
        """The output as the result shows it: whole when it fits head and tail, else the
        head, a marker naming the spill file, and the tail."""
        if self.total <= HEAD_BYTES + TAIL_BYTES:
            data, _ = self._tail.since(0)
            return decode_output(bytes(self._head) + data)
        data, begin = self._tail.since(0)
        head = decode_output(bytes(self._head))
        tail = decode_output(data, cut=True)
        hidden = begin  # the tail log starts after the head: what it dropped is hidden
        marker = f"[... {hidden} bytes of output not shown ({self.total} in all)"
        if self._spill is not None:
            marker += f"; the whole output is in {self._spill.shown}"
            if self._spill.dropped:
                marker += (
                    f" up to byte {self._spill.written}: the rest was not saved, the "
                    f"spill directory is at its {SPILL_DIR_BYTES}-byte limit"
                )
            marker += " (read ranges of it with read_file offset and limit, or grep)"
        elif self._failed is not None:
            marker += f"; they were not saved (the spill file could not be made: {self._failed})"
        marker += " ...]"
        separator = "" if head.endswith("\n") else "\n"
        return f"{head}{separator}{marker}\n{tail}"

"""Capture, from the loop's side: how a run hands its records to its sink.

The records and the sink's protocol (`ModelCallRecord`, `ToolResultRecord`, `CaptureSink`,
`CaptureSinkFactory`) are defined in `tiller.capture`, the record format below the loop
that `tiller.model.replay` reads too; they are re-exported here for the loop's modules,
and `tiller.loop` exports them as it always has.

`RunOptions.capture_sink` is a *factory*: each run gets its own sink, so concurrent runs
never interleave their records. Per model call the sink receives only the messages added
since the previous call plus the response — not the whole history again — so a capture
grows linearly with the run. It is called on the success path only, and the loop shields
the run from it: a sink that raises is logged and ignored, and it must not block (buffer,
and write in `close`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..capture import CaptureSink as CaptureSink
from ..capture import CaptureSinkFactory as CaptureSinkFactory
from ..capture import ModelCallRecord as ModelCallRecord
from ..capture import ToolResultRecord as ToolResultRecord

__all__ = [
    "CaptureSink",
    "CaptureSinkFactory",
    "ModelCallRecord",
    "ToolResultRecord",
    "call_quietly",
]

_logger = logging.getLogger(__name__)


def call_quietly(fn: Callable[[], object]) -> None:
    """Capture never breaks a run: a sink that raises is logged and ignored."""
    try:
        fn()
    except Exception:
        _logger.exception("the capture sink failed; the run goes on")

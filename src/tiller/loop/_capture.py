"""Capture: what a run said to its model and what its tools returned, for offline replay.

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
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

__all__ = [
    "CaptureSink",
    "CaptureSinkFactory",
    "ModelCallRecord",
    "ToolResultRecord",
    "call_quietly",
]

_logger = logging.getLogger(__name__)


@dataclass(slots=True, frozen=True)
class ModelCallRecord:
    """One model call: the messages added since the previous call (JSON dicts, in the
    `tiller.conversation` shape), and the response (an `AssistantMessage` as JSON).

    `step` is the 1-based number of the call in the run. Known gap: text folded into a
    user message that an earlier record already carried (the nudge after an empty turn)
    is not recorded again."""

    run_id: str
    step: int
    new_messages: list[dict[str, Any]]
    response: dict[str, Any]
    usage: dict[str, Any] = field(default_factory=dict)
    finish_reason: str | None = None
    model: str = ""
    #: The model's stream events as JSON (`tiller.model._codec`), so a replay streams the
    #: very same deltas and the run's AG-UI stream comes out identical.
    stream: list[dict[str, Any]] = field(default_factory=list)


@dataclass(slots=True, frozen=True)
class ToolResultRecord:
    """One tool call's result, as the model read it."""

    run_id: str
    step: int
    call_id: str
    name: str
    content: str
    is_error: bool = False


@runtime_checkable
class CaptureSink(Protocol):
    """Receives one run's records. Must not raise and must not block."""

    def model_call(self, record: ModelCallRecord) -> None: ...

    def tool_result(self, record: ToolResultRecord) -> None: ...

    def close(self) -> None:
        """The run ended: flush what is buffered."""
        ...


#: `(run_id) -> sink`, called once per run.
CaptureSinkFactory = Callable[[str], CaptureSink]


def call_quietly(fn: Callable[[], object]) -> None:
    """Capture never breaks a run: a sink that raises is logged and ignored."""
    try:
        fn()
    except Exception:
        _logger.exception("the capture sink failed; the run goes on")

"""`Progress`: how a running tool call tells the run's observers what it is doing.

A tool reports through `ctx.progress`, which sends one `CUSTOM` event named
`tiller.progress` into the run's AG-UI stream per report, so the terminal view, the web
console, the event log and a test all see it. The value is
`{"toolCallId": ..., "kind": ..., ...}`, with one of these kinds:

| kind | fields | what it is |
|---|---|---|
| `output` | `text`, `stream` | a chunk of a command's stdout or stderr |
| `status` | `message`, `fraction?` | a line of status, optionally how far along (0 to 1) |
| `bytes` | `done`, `total?` | bytes transferred (a download): `transferred()` |
| `artifact` | `mime`, `data` (base64), `caption` | something produced: an image, a file |
| `subagent_tool_call` | `childCallId`, `toolName`, `phase` | a subagent's call changed |
| `subagent_activity` | `message` | what a subagent is doing now |
| `subagent_tokens` | `tokens` | a subagent's cumulative tokens (at most every 0.5 s) |

Progress belongs to the call: once the call has returned, its `Progress` stops emitting
(a detached command reports through `ctx.notify` instead). Reports are synchronous and
cheap, and safe from a sync tool's worker thread, like every emit.
"""

from __future__ import annotations

import base64
import threading
import time
from collections.abc import Callable
from typing import Any, Final, Literal

from ..errors import UsageError
from ..events import CustomEvent, Event

__all__ = ["PROGRESS_EVENT", "Progress", "SubagentCallPhase"]

#: The name of the `CUSTOM` event every progress report is.
PROGRESS_EVENT: Final = "tiller.progress"
#: The least time between two `subagent_tokens` reports.
TOKENS_INTERVAL_SECONDS: Final = 0.5

SubagentCallPhase = Literal["started", "finished", "errored"]


def _drop(event: Event) -> None:
    """No one is listening (a context built for a test)."""


class Progress:
    """One call's progress channel. Calling it is `status`: `ctx.progress("indexing", 0.5)`."""

    __slots__ = ("_call_id", "_closed", "_emit", "_lock", "_tokens_at")

    def __init__(self, call_id: str, emit: Callable[[Event], object] = _drop) -> None:
        self._call_id = call_id
        self._emit = emit
        self._closed = False
        self._lock = threading.Lock()
        self._tokens_at = float("-inf")

    @property
    def call_id(self) -> str:
        return self._call_id

    def close(self) -> None:
        """The call is over: later reports are dropped (they would name a finished call)."""
        self._closed = True

    def _send(self, kind: str, fields: dict[str, Any]) -> None:
        if self._closed:
            return
        self._emit(
            CustomEvent(
                name=PROGRESS_EVENT, value={"toolCallId": self._call_id, "kind": kind, **fields}
            )
        )

    def __call__(self, message: str, fraction: float | None = None) -> None:
        self.status(message, fraction)

    def status(self, message: str, fraction: float | None = None) -> None:
        """A line of status; `fraction` (0 to 1) says how far along the call is."""
        fields: dict[str, Any] = {"message": message}
        if fraction is not None:
            if not 0.0 <= fraction <= 1.0:
                raise UsageError(f"progress fraction must be between 0 and 1, not {fraction}")
            fields["fraction"] = fraction
        self._send("status", fields)

    def output(self, text: str, stream: Literal["stdout", "stderr"] = "stdout") -> None:
        """A chunk of output, as it arrives."""
        if text:
            self._send("output", {"text": text, "stream": stream})

    def transferred(self, done: int, total: int | None = None) -> None:
        """Bytes transferred so far, and the total when known."""
        fields: dict[str, Any] = {"done": done}
        if total is not None:
            fields["total"] = total
        self._send("bytes", fields)

    def artifact(self, mime: str, data: bytes, caption: str = "") -> None:
        """Something the call produced (an image shows inline in a UI)."""
        encoded = base64.b64encode(data).decode("ascii")
        self._send("artifact", {"mime": mime, "data": encoded, "caption": caption})

    def subagent_tool_call(
        self, child_call_id: str, tool_name: str, phase: SubagentCallPhase
    ) -> None:
        """A subagent's tool call started, finished or errored."""
        self._send(
            "subagent_tool_call",
            {"childCallId": child_call_id, "toolName": tool_name, "phase": phase},
        )

    def subagent_activity(self, message: str) -> None:
        """What a subagent is doing now (send it when that changes)."""
        self._send("subagent_activity", {"message": message})

    def subagent_tokens(self, tokens: int, *, force: bool = False) -> bool:
        """A subagent's cumulative token count, at most every 0.5 s unless `force`
        (send the last one forced). Returns whether it was sent."""
        now = time.monotonic()
        with self._lock:
            if not force and now - self._tokens_at < TOKENS_INTERVAL_SECONDS:
                return False
            self._tokens_at = now
        self._send("subagent_tokens", {"tokens": tokens})
        return True

    def __repr__(self) -> str:
        return f"<Progress {self._call_id}{' closed' if self._closed else ''}>"

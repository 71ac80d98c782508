"""What running tool calls report (`tiller.progress`), and the task checklist
(`tiller.tasks`), as the terminal view draws them.

`ProgressBoard` keeps, per running call, the tail of its output, how many lines were
hidden, and its latest status. It draws in one of two ways, chosen once:

- **live** (a terminal): a small region under the calls shows each running call's last
  lines and its status (percentage, bytes, a subagent's activity), redrawn as reports
  arrive. When the call ends the region goes, and its last lines stay printed with a
  count of the earlier ones.
- **streamed** (a pipe, CI): the first lines are printed as they arrive; when the call
  ends, a count of the lines left out and the last few (where a test run's verdict is),
  `max_lines` in all. A status is printed when its message changes or it passes another
  quarter, so a download does not print a line per chunk.

Either way an artifact is printed as a one-line label. The board only says what to print
(`Text` lines) and what the live region holds; `RunView` owns the console. A report's
values are a tool's (or a stored log's): each is shown `printable`, and one of an
unexpected type as text, never converted.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, TypeGuard

from rich.console import Group, RenderableType
from rich.text import Text

from ._safe import printable

__all__ = ["MAX_OUTPUT_LINES", "ProgressBoard", "checklist_lines", "human_bytes"]

#: Output lines shown per call (the last ones, live; the first and last ones, streamed).
MAX_OUTPUT_LINES: Final = 8
#: Of those, how many a streamed view keeps for the end of the output.
_STREAMED_TAIL: Final = 3
#: Characters kept of one output line (the console cuts it to its width anyway).
_LINE_CHARS: Final = 400
_INDENT: Final = "   "
# Terminal control sequences (colours, cursor moves, titles) and other control
# characters: output is shown as plain text under the call.
_CONTROL: Final = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-_]|[\x00-\x08\x0b-\x1f\x7f]"
)
_MARK_STYLES: Final[Mapping[str, tuple[str, str]]] = {
    "completed": ("[x]", "green"),
    "in_progress": ("[~]", "bold yellow"),
    "pending": ("[ ]", "dim"),
}


def human_bytes(n: float) -> str:
    """`512 B`, `12.3 KiB`, `4.0 MiB`."""
    if n < 1024:
        return f"{int(n)} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if n < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


def _clean(line: str) -> str:
    """One output line as shown: what a carriage return overwrote is dropped (progress
    bars), control sequences removed, tabs expanded, cut short."""
    line = line.rstrip("\r")
    if "\r" in line:
        line = line.rsplit("\r", 1)[1]
    line = printable(_CONTROL.sub("", line.expandtabs(4)))  # what the pattern leaves too
    return line if len(line) <= _LINE_CHARS else line[: _LINE_CHARS - 1] + "…"


def _output_line(line: str, stream: str) -> Text:
    shown = Text(f"{_INDENT}│ ", style="dim", no_wrap=True, overflow="ellipsis")
    shown.append(line, style="dim yellow" if stream == "stderr" else "dim")
    return shown


def _note(text: str) -> Text:
    return Text(f"{_INDENT}… {text}", style="dim")


@dataclass
class _Call:
    """One running call's progress."""

    name: str
    # Text after the last newline, per stream, waiting for the rest of its line.
    partial: dict[str, str] = field(default_factory=dict)
    tail: deque[tuple[str, str]] = field(default_factory=deque)
    lines: int = 0
    printed: int = 0
    activity: str | None = None
    # What the last streamed status line said, so a repeat is not printed.
    status_key: tuple[Any, ...] | None = None

    def feed(self, text: str, stream: str, keep: int) -> list[tuple[str, str]]:
        """Take a chunk; returns the lines it completed."""
        pending = self.partial.get(stream, "") + text
        *complete, rest = pending.split("\n")
        self.partial[stream] = rest
        return [self._line(line, stream, keep) for line in complete]

    def flush(self, keep: int) -> list[tuple[str, str]]:
        """The unterminated rest of each stream, as lines: the call is over."""
        rest = [(text, stream) for stream, text in self.partial.items() if text]
        self.partial.clear()
        return [self._line(text, stream, keep) for text, stream in rest]

    def _line(self, raw: str, stream: str, keep: int) -> tuple[str, str]:
        line = (_clean(raw), stream)
        self.lines += 1
        self.tail.append(line)
        while len(self.tail) > keep:
            self.tail.popleft()
        return line


class ProgressBoard:
    """The progress of the calls that are running; see the module docstring."""

    def __init__(self, *, live: bool, max_lines: int = MAX_OUTPUT_LINES) -> None:
        self.live = live
        self.max_lines = max_lines
        self._calls: dict[str, _Call] = {}
        self._last_printed: str | None = None  # the call whose line was printed last

    @property
    def active(self) -> bool:
        """Whether the live region has something to show."""
        return any(call.tail or call.activity for call in self._calls.values())

    def report(self, name: str, value: Mapping[str, Any]) -> list[Text]:
        """Take one `tiller.progress` value from the call named `name`; returns the
        lines to print now."""
        call_id = str(value.get("toolCallId", ""))
        call = self._calls.get(call_id)
        if call is None:
            call = self._calls[call_id] = _Call(printable(name))
        kind = value.get("kind", "status")
        if kind == "output":
            stream = str(value.get("stream", "stdout"))
            return self._output(
                call_id, call, call.feed(str(value.get("text", "")), stream, self.max_lines)
            )
        if kind == "artifact":
            return self._labelled(call_id, [_artifact(value)])
        line, key = _activity(kind, value)
        if line is None:
            return []
        call.activity = line
        if self.live or key is None or key == call.status_key:
            return []
        call.status_key = key
        return self._labelled(call_id, [_note(line)])

    def finish(self, call_id: str) -> list[Text]:
        """The call has returned: what stays printed of its progress. Forgets it."""
        call = self._calls.get(call_id)
        if call is None:
            return []
        try:
            return self._final(call_id, call)
        finally:
            del self._calls[call_id]
            if not self._calls:
                self._last_printed = None  # a lone call's lines need no label

    def _final(self, call_id: str, call: _Call) -> list[Text]:
        rest = call.flush(self.max_lines)
        if self.live:
            if not call.tail:
                return []
            lines = self._label(call_id)
            earlier = call.lines - len(call.tail)
            if earlier > 0:
                lines.append(_note(f"{earlier} earlier line{'s' * (earlier != 1)} of output"))
            lines.extend(_output_line(*line) for line in call.tail)
            return lines
        shown = self._output(call_id, call, rest)  # what still fits in the head
        unseen = call.lines - call.printed
        tail = min(unseen, _STREAMED_TAIL)
        hidden = unseen - tail
        if hidden > 0:
            shown += self._labelled(
                call_id, [_note(f"{hidden} more line{'s' * (hidden != 1)} of output")]
            )
        if tail > 0:
            lines = [_output_line(*line) for line in list(call.tail)[-tail:]]
            shown += self._labelled(call_id, lines)
        return shown

    def output_lines(self, call_id: str) -> int:
        """How many lines of output the running call has sent so far."""
        call = self._calls.get(call_id)
        return 0 if call is None else call.lines + sum(1 for t in call.partial.values() if t)

    def render(self) -> RenderableType:
        """The live region: each running call's last lines and its status."""
        parts: list[Text] = []
        several = sum(1 for call in self._calls.values() if call.tail or call.activity) > 1
        for call in self._calls.values():
            if not (call.tail or call.activity):
                continue
            if several:
                parts.append(Text(f"{_INDENT}⋯ {call.name}", style="dim bold"))
            earlier = call.lines - len(call.tail)
            if earlier > 0:
                parts.append(_note(f"{earlier} earlier line{'s' * (earlier != 1)}"))
            parts.extend(_output_line(line, stream) for line, stream in call.tail)
            if call.activity:
                parts.append(Text(f"{_INDENT}⋯ {call.activity}", style="cyan"))
        return Group(*parts)

    # ── printing, streamed ───────────────────────────────────────────────────────

    def _output(self, call_id: str, call: _Call, lines: list[tuple[str, str]]) -> list[Text]:
        if self.live:
            return []
        room = max(0, self.max_lines - _STREAMED_TAIL - call.printed)
        shown = lines[:room]
        call.printed += len(shown)
        if not shown:
            return []
        return self._labelled(call_id, [_output_line(line, stream) for line, stream in shown])

    def _labelled(self, call_id: str, lines: list[Text]) -> list[Text]:
        """`lines`, after the call's name if another call printed last."""
        return self._label(call_id) + lines

    def _label(self, call_id: str) -> list[Text]:
        previous, self._last_printed = self._last_printed, call_id
        call = self._calls.get(call_id)
        if previous is None or previous == call_id or call is None:
            return []
        return [Text(f"{_INDENT}⋯ {call.name}", style="dim bold")]


def _activity(kind: str, value: Mapping[str, Any]) -> tuple[str | None, tuple[Any, ...] | None]:
    """A status-like report as one line, and the key that decides whether a streamed
    view prints it (None: never streamed, only shown live)."""
    if kind == "status":
        message = printable(value.get("message", ""))
        fraction = value.get("fraction")
        if _finite(fraction):
            return f"{message} ({fraction:.0%})", ("status", message, math.floor(fraction * 4))
        if fraction is not None:
            return f"{message} ({printable(fraction)})", ("status", message, str(fraction))
        return message, ("status", message)
    if kind == "bytes":
        done, total = value.get("done", 0), value.get("total")
        if not (isinstance(done, int) and not isinstance(done, bool) and done >= 0):
            return printable(f"{done} transferred"), ("bytes", str(done))
        if isinstance(total, int) and not isinstance(total, bool) and total > 0:
            share = done / total
            line = f"{human_bytes(done)} / {human_bytes(total)} ({share:.0%})"
            return line, ("bytes", math.floor(share * 4))
        # No total: print each time the count doubles.
        return f"{human_bytes(done)} transferred", ("bytes", done.bit_length())
    if kind == "subagent_activity":
        message = printable(value.get("message", ""))
        return f"subagent: {message}", ("activity", message)
    if kind == "subagent_tool_call":
        tool = value.get("toolName", "?")
        phase = value.get("phase", "")
        key = None if phase == "finished" else ("call", str(value.get("childCallId")), str(phase))
        return printable(f"subagent: {tool} {phase}"), key
    if kind == "subagent_tokens":
        tokens = value.get("tokens", 0)
        count = f"{tokens:,}" if isinstance(tokens, int) else printable(tokens)
        return f"subagent: {count} tokens", None
    return None, None


def _finite(value: Any) -> TypeGuard[float]:
    """A finite real number (not a bool)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _artifact(value: Mapping[str, Any]) -> Text:
    data = str(value.get("data", ""))
    size = len(data) * 3 // 4 - data[-2:].count("=")
    caption = printable(value.get("caption", "")) or "artifact"
    return Text(f"{_INDENT}▣ {caption}", style="magenta") + Text(
        printable(f" ({value.get('mime', '?')}, {human_bytes(size)})"), style="dim"
    )


def checklist_lines(tasks: Sequence[Mapping[str, Any]]) -> list[Text]:
    """The checklist as a compact block: a count, then one line a task."""
    done = sum(task.get("status") == "completed" for task in tasks)
    lines = [Text(f"  tasks {done}/{len(tasks)} done", style="bold blue")]
    for task in tasks:
        mark, style = _MARK_STYLES.get(str(task.get("status")), ("[?]", "dim"))
        subject_style = "dim" if task.get("status") == "completed" else ""
        lines.append(
            Text("    ")
            + Text(mark, style=style)
            + Text(printable(f" {task.get('id', '?')} "), style="dim")
            + Text(printable(task.get("subject", "")), style=subject_style)
        )
    return lines

"""`ReplayModel`: a model that answers a run's calls from its capture, for offline replay.

The Nth call is answered with the Nth recorded response, streamed as the very stream events
the real model sent, so a replayed run emits the same AG-UI stream — ids included, when it
runs under the capture's run id. Order-keyed, like klieo's replay client: a capture holds
the messages each call *added*, not the whole history, so there is no fingerprint to key on.

What a replay checks is the *agent*, since the model's side is recorded: each request's new
messages (what the loop added since the previous call — the previous response, the tool
results, steering, nudges) must equal the recorded ones. A tool that now returns something
else, or a tool that is gone (its refusal differs from the recorded result), shows up as
different new messages at the next call, and the replay raises `Divergence` naming that
step and the tool result that changed. So does a changed agent: a capture records, per
call, what the request carried besides the messages (`request_shape`: the system prompt,
the tools the model was shown and the output schema), and a request whose system prompt,
tools or output schema differ from the recorded ones diverges, naming which (a capture
written before issue 18 has no shapes: it is not checked for them). `allow_prompt_edits=True`
lets the system prompt differ (a reworded prompt replayed against old captures) while a
changed tool set or schema still diverges. The replay model declares the recorded output
mode as its `output_modes`, so an agent a factory builds on it chooses the mode the
recorded run asked in (a capture that did not record the mode declares none, as before).
Asking for more calls than were recorded is a
divergence too. `Divergence` is a non-retryable `ModelError`, so the run stops with stop
cause `error` and the stream ends with `RUN_ERROR` (code `MODEL_ERROR`).

With `strict=False` mismatched messages are only collected in `mismatches` and the replay
goes on (a redacted capture, or tools run live whose output varies); running out of records
is still a divergence, since there is no response to give.
"""

from __future__ import annotations

import difflib
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

import orjson

from ..conversation import AssistantMessage, Usage, UserMessage
from ._base import (
    Finish,
    ModelRequest,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    UsageReport,
)
from ._codec import stream_event_from_json
from ._errors import ModelError
from ._output import OUTPUT_MODES, OutputMode
from ._request_shape import request_shape

if TYPE_CHECKING:
    from ..capture import Capture, ModelCallRecord

__all__ = ["Divergence", "ReplayModel", "request_shape"]

_PROVIDER = "replay"
_DIFF_LINES = 40
_SHOWN = 200

Message = UserMessage | AssistantMessage


class Divergence(ModelError):
    """The run asked the recording something it did not record: the request at `step`
    (the model call, from 1) brought other new messages than recorded, or there was no
    recorded call left. `expected` and `got` are the new messages as JSON; `diff` says how
    they differ, readably."""

    def __init__(
        self,
        step: int,
        reason: str,
        *,
        expected: list[dict[str, Any]] | None = None,
        got: list[dict[str, Any]] | None = None,
        diff: str = "",
    ) -> None:
        message = f"replay diverged at step {step}: {reason}"
        if diff:
            message = f"{message}\n{diff}"
        super().__init__(message, retryable=False, provider=_PROVIDER)
        self.step = step
        self.reason = reason
        self.expected = expected
        self.got = got
        self.diff = diff


class ReplayModel:
    """A `Model` answering from a `Capture` (see the module docstring).

    ```python
    replay = ReplayModel(capture)
    result = await Agent(replay, tools).run_in(ctx, prompt, options, run_id=capture.run_id)
    ```
    """

    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name

    def __init__(
        self,
        capture: Capture,
        *,
        strict: bool = True,
        allow_prompt_edits: bool = False,
        check_agent: bool = True,
        provider: str | None = None,
        name: str | None = None,
    ) -> None:
        self.capture = capture
        self.strict = strict
        #: A changed system prompt is no divergence (tools and the output schema still are).
        self.allow_prompt_edits = allow_prompt_edits
        #: False: only the messages are compared, not the request's shape (the agent
        #: replaying is a stand-in for the recorded one, e.g. `tiller runs replay` without
        #: `--agent`, whose tools answer from the recording).
        self.check_agent = check_agent
        #: The shape the recording's calls had, as of the call answered last (records
        #: carry it only when it changed; None: not recorded, an older capture).
        self._recorded_shape: dict[str, Any] | None = None
        #: The last shape difference reported, so a lenient replay lists each change once
        #: rather than at every call after it.
        self._reported_shapes: tuple[Any, ...] | None = None
        self._calls: list[ModelCallRecord] = capture.model_calls
        recorded_provider, _, recorded_name = capture.model.partition(":")
        # The recorded labels, so usage and pricing in the replayed stream come out the same.
        self.provider = provider or recorded_provider or _PROVIDER
        self.name = name or recorded_name or capture.model or _PROVIDER
        self.context_window: int | None = None
        #: The output mode the recording asked in, so an agent built on this model (by a
        #: factory) chooses it too; empty when none was recorded (`prompted`, as before).
        self.output_modes: tuple[OutputMode, ...] = _recorded_output_modes(self._calls)
        #: Calls answered so far.
        self.served = 0
        #: Divergences seen by a non-strict replay (a strict one raises the first).
        self.mismatches: list[Divergence] = []
        #: What the previous request ended with, to find the messages new in the next one.
        self._previous_length = 0
        self._previous_response_id: str | None = None

    @property
    def remaining(self) -> int:
        """Recorded calls not yet answered."""
        return len(self._calls) - self.served

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Check `request` against the next recorded call, then stream its response."""
        number = self.served + 1
        if number > len(self._calls):
            count = len(self._calls)
            raise Divergence(
                number,
                f"the run asked for model call {number}, but the capture of run "
                f"{self.capture.run_id!r} has only {count} call{'' if count == 1 else 's'}",
            )
        record = self._calls[number - 1]
        new = self._new_messages(request.messages, first=number == 1, expected=record)
        self.served = number
        if record.agent is not None:
            self._recorded_shape = record.agent
        step = record.step or number
        divergences: list[Divergence] = []
        if self.check_agent and self._recorded_shape is not None:
            divergences.extend(self._shape_divergences(step, request))
        if (
            new is not None
            and new != record.new_messages
            and _legacy(request.messages, new) != record.new_messages
        ):
            divergences.append(_diverged(step, record.new_messages, new))
        for divergence in divergences:
            if self.strict:
                raise divergence
            self.mismatches.append(divergence)
        response_id = record.response.get("id")
        self._previous_response_id = response_id if isinstance(response_id, str) else None
        self._previous_length = len(request.messages)
        for event in _events(record):
            yield event

    def _shape_divergences(self, step: int, request: ModelRequest) -> list[Divergence]:
        """How the agent's side of `request` differs from the recording's, if it does."""
        recorded = self._recorded_shape or {}
        live = request_shape(request)
        if self.allow_prompt_edits:
            live["system"] = recorded.get("system")
        if (recorded, live) == self._reported_shapes:
            return []  # the same difference as at the previous call: reported there
        found: list[Divergence] = []
        for key, what in _SHAPE_PARTS:
            if key not in recorded and key in _LATER_SHAPE_PARTS:
                continue  # recorded before this part was: not checked for it
            want, have = recorded.get(key), live[key]
            if want == have:
                continue
            reason = _tools_changed(want, have) if key == "tools" else f"{what} differs"
            found.append(
                Divergence(
                    step,
                    f"{reason} from the recording (the agent changed since it was recorded; "
                    "record it again)",
                    diff=_diff_values(want, have),
                )
            )
        self._reported_shapes = (recorded, live) if found else None
        return found

    def _new_messages(
        self, messages: Sequence[Message], *, first: bool, expected: ModelCallRecord
    ) -> list[dict[str, Any]] | None:
        """The messages this request adds, computed as the loop does when it captures.

        The loop records `history[captured:]`, where `captured` is where the previous
        call's request ended plus its response if the response was kept. `messages` is the
        history *window*, which may have lost old messages at its front since the previous
        call, so the boundary is found from the back: just after the previous response
        (its id is unique in the run), or, when the response was not kept (an empty turn),
        at the previous request's length. The first call's boundary is whatever was there
        before the run, which the recording tells by its length.
        """
        if first:
            count = len(expected.new_messages)
            if count > len(messages):
                return _dump(messages)  # fewer messages than recorded: a divergence
            return _dump(messages[len(messages) - count :])
        start = self._previous_length
        wanted = self._previous_response_id
        if wanted:
            for index in range(len(messages) - 1, -1, -1):
                message = messages[index]
                if isinstance(message, AssistantMessage) and message.id == wanted:
                    start = index + 1
                    break
        return _dump(messages[start:])

    async def aclose(self) -> None:
        """Nothing to release; here for the `Model` protocol."""

    def __repr__(self) -> str:
        return (
            f"ReplayModel(run {self.capture.run_id!r}, {len(self._calls)} calls, "
            f"served={self.served}, strict={self.strict})"
        )


#: The parts of a shape, and how a divergence names each.
_SHAPE_PARTS = (
    ("system", "the system prompt"),
    ("tools", "the tools"),
    ("output_schema", "the output schema"),
    ("output_mode", "the output mode"),
)
#: Parts added to the shape after it was first recorded: an older capture lacks them.
_LATER_SHAPE_PARTS = frozenset({"output_mode"})


def _recorded_output_modes(calls: Sequence[ModelCallRecord]) -> tuple[OutputMode, ...]:
    """The output mode of the first recorded shape that names one, as `output_modes`."""
    for record in calls:
        mode = (record.agent or {}).get("output_mode")
        if mode in OUTPUT_MODES:
            return (mode,)
    return ()


def _tools_changed(want: Any, have: Any) -> str:
    """Which tools were added, removed or changed (their description or parameters)."""
    wanted = {tool["name"]: tool for tool in want or ()}
    had = {tool["name"]: tool for tool in have or ()}
    parts = []
    added = sorted(set(had) - set(wanted))
    removed = sorted(set(wanted) - set(had))
    changed = sorted(name for name in set(wanted) & set(had) if wanted[name] != had[name])
    if added:
        parts.append(f"added {', '.join(added)}")
    if removed:
        parts.append(f"removed {', '.join(removed)}")
    if changed:
        parts.append(f"changed {', '.join(changed)}")
    return f"the tools differ ({'; '.join(parts) or 'their order'})"


def _dump(messages: Sequence[Message]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


def _legacy(messages: Sequence[Message], new: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`new` as a capture recorded before calls had runtime ids holds it: each call and
    result under the provider's id, with no `provider_id`. Such a capture still replays."""
    provider = {
        call.id: call.provider_id
        for message in messages
        if isinstance(message, AssistantMessage)
        for call in message.tool_calls
        if call.provider_id
    }
    if not provider:
        return new
    out: list[dict[str, Any]] = []
    for message in new:
        message = dict(message)
        if message.get("tool_calls"):
            message["tool_calls"] = [
                {
                    **{key: value for key, value in call.items() if key != "provider_id"},
                    "id": provider.get(call["id"], call["id"]),
                }
                for call in message["tool_calls"]
            ]
        if message.get("tool_results"):
            message["tool_results"] = [
                {**result, "call_id": provider.get(result["call_id"], result["call_id"])}
                for result in message["tool_results"]
            ]
        out.append(message)
    return out


def _events(record: ModelCallRecord) -> list[StreamEvent]:
    """The recorded stream; a record without one (written by a loop that did not keep the
    stream) is streamed from its response, shaped like a provider's."""
    if record.stream:
        return [stream_event_from_json(event) for event in record.stream]
    message = AssistantMessage.model_validate(record.response)
    events: list[StreamEvent] = []
    for block in message.reasoning:
        if block.text:
            events.append(ReasoningDelta(text=block.text))
        if block.signature is not None:
            events.append(ReasoningDelta(signature=block.signature))
        if block.redacted is not None:
            events.append(ReasoningDelta(redacted=block.redacted))
    if message.text:
        events.append(TextDelta(message.text))
    for index, call in enumerate(message.tool_calls):
        # The provider's id, as it was streamed: the replayed run gives the runtime's.
        events.append(ToolCallStart(index, call.provider_id or call.id, call.name))
        events.append(ToolCallArgsDelta(index, call.arguments))
        events.append(ToolCallEnd(index))
    if record.usage:
        events.append(UsageReport(Usage.model_validate(record.usage)))
    reason = record.finish_reason or ("tool_calls" if message.tool_calls else "stop")
    events.append(Finish(reason))  # type: ignore[arg-type]  # recorded from a FinishReason
    return events


def _diverged(step: int, expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> Divergence:
    return Divergence(
        step,
        _what_changed(expected, got),
        expected=expected,
        got=got,
        diff=_diff(expected, got),
    )


def _what_changed(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> str:
    """One line naming the first difference: a tool result by call and tool, if it is one."""
    for index, (want, have) in enumerate(zip(expected, got, strict=False)):
        if want == have:
            continue
        wanted_results = {r["call_id"]: r for r in want.get("tool_results", ())}
        had_results = {r["call_id"]: r for r in have.get("tool_results", ())}
        for call_id, result in wanted_results.items():
            other = had_results.get(call_id)
            if other != result:
                name = result.get("name", "?")
                return (
                    f"the result of tool call {call_id} ({name}) differs from the recording: "
                    f"expected {_short(result.get('content'))}, got "
                    f"{_short(other.get('content')) if other else 'no result'}"
                )
        extra = sorted(set(had_results) - set(wanted_results))
        if extra:
            return f"the run sent results the recording has not: {', '.join(extra)}"
        return f"new message {index + 1} differs from the recording"
    return (
        f"the run added {len(got)} message(s) since the previous call; "
        f"the recording has {len(expected)}"
    )


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"


def _diff(expected: list[dict[str, Any]], got: list[dict[str, Any]]) -> str:
    return _diff_values(expected, got)


def _diff_values(expected: Any, got: Any) -> str:
    def lines(value: Any) -> list[str]:
        if isinstance(value, str):  # a prompt: its own lines, not one escaped string
            return value.splitlines()
        return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode().splitlines()

    diff = list(
        difflib.unified_diff(lines(expected), lines(got), "recorded", "replayed", lineterm="")
    )
    if len(diff) > _DIFF_LINES:
        diff = [*diff[:_DIFF_LINES], f"… ({len(diff) - _DIFF_LINES} more diff lines)"]
    return "\n".join(diff)

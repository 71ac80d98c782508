"""`CallCapture`: a run's capture port — what each model call was sent and answered.

The capture sink (`RunOptions.capture_sink`, one per run) records, per model call, only
the messages added since the previous call and the response (not the whole history), and
each tool result, so a run can be replayed offline (`tiller.model.replay`). This keeps the
offsets that makes possible: where the last call's messages ended, and the newest message
as the history window shortened it (the model was sent that, so the capture records it).
A sink that fails is logged and ignored: a capture never stops a run.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from ..conversation import AssistantMessage, Message, UserMessage
from ..model import ModelRequest, request_shape, stream_event_to_json
from ..state import RunState
from ._capture import CaptureSink, ModelCallRecord, ToolResultRecord, call_quietly

if TYPE_CHECKING:
    from ._model_turn import ModelAnswer
    from ._options import RunOptions

__all__ = ["CallCapture"]

_logger = logging.getLogger(__name__)


class CallCapture:
    """Records one run's model calls and tool results on its sink (None: not captured)."""

    def __init__(self, sink: CaptureSink | None, state: RunState, model: str) -> None:
        self.sink = sink
        self._state = state
        self._model = model
        #: Messages before this index were already captured. A fresh run captures its
        #: prompt with the first call; a continued one starts after what it was given.
        self._from = 0 if state.step == 0 else len(state.messages)
        # The newest message as the last request sent it, shortened by the history
        # window, with its index: a capture records what the model was sent.
        self._sent_shortened: tuple[int, UserMessage | AssistantMessage] | None = None
        # The agent's side of the request about to go out (system prompt, tools, output
        # schema), and of the last one recorded: a record carries it when it changed.
        self._shape: dict[str, Any] | None = None
        self._recorded_shape: dict[str, Any] | None = None

    @classmethod
    def open(cls, options: RunOptions, state: RunState, model: str) -> CallCapture:
        """The capture of the run `state` is, from `options`' sink factory."""
        sink: CaptureSink | None = None
        if options.capture_sink is not None:
            try:
                sink = options.capture_sink(state.run_id)
            except Exception:
                _logger.exception(
                    "the capture sink factory failed; run %s is not captured", state.run_id
                )
        return cls(sink, state, model)

    @property
    def on(self) -> bool:
        return self.sink is not None

    def sent(self, request: ModelRequest) -> None:
        """`request` is about to go out: its messages are the history window (maybe
        shortened), and its system prompt, tools and output schema are the agent's."""
        if self.sink is None:
            return  # nothing records what was sent: no need to know
        self._shape = request_shape(request)
        window = request.messages
        messages = self._state.messages
        shortened = bool(window) and window[-1] is not messages[-1]
        self._sent_shortened = (len(messages) - 1, window[-1]) if shortened else None

    def model_call(self, answer: ModelAnswer, *, appended: bool) -> None:
        """Record one model call: the messages new since the last one, and the response
        (`appended`: the response is already the history's last message)."""
        sink = self.sink
        if sink is None:
            return
        state = self._state
        messages: list[Message] = list(state.messages)
        end = len(messages) - 1 if appended else len(messages)
        sent = messages[self._from : end]
        if self._sent_shortened is not None:
            index, message = self._sent_shortened
            if self._from <= index < end:
                sent[index - self._from] = message
        self._from = len(messages)
        shape = self._shape if self._shape != self._recorded_shape else None
        if shape is not None:
            self._recorded_shape = shape
        record = ModelCallRecord(
            run_id=state.run_id,
            step=state.step,
            new_messages=[m.model_dump(mode="json") for m in sent],
            response=answer.message.model_dump(mode="json"),
            usage=answer.usage.model_dump() if answer.usage is not None else {},
            finish_reason=answer.finish_reason,
            model=self._model,
            stream=[stream_event_to_json(e) for e in answer.events or ()],
            agent=shape,
        )
        call_quietly(lambda: sink.model_call(record))

    def tool_result(self, call_id: str, name: str, content: str, *, is_error: bool) -> None:
        sink = self.sink
        if sink is None:
            return
        state = self._state
        record = ToolResultRecord(state.run_id, state.step, call_id, name, content, is_error)
        call_quietly(lambda: sink.tool_result(record))

    def history_rewritten(self, *, removed: int) -> None:
        """Compaction replaced the history with `removed` fewer messages."""
        self._from = max(self._from - removed, 0)

    def close(self) -> None:
        sink = self.sink
        if sink is not None:
            call_quietly(sink.close)

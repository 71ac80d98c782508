"""`RunTrace`: one run's spans and metrics, recorded as the loop calls its hooks.

The span tree of one run (names as the GenAI conventions give them)::

    invoke_agent {agent}                 the run (or one segment of it: see below)
      chat {model}                       each model call of a turn (retries inside it)
      execute_tool {tool}                each call of a step: the gate, then the tool
        invoke_agent {subagent}          a subagent the `agent` tool started
          chat …, execute_tool …

The loop calls `started()` and `ended(exc)` around the run, `chat(...)` around each
streamed model call, and `tool_opened / tool_gated / tool_running / tool_closed` as one
call goes through the gate, runs and is answered. A call held for a person is still
open when the run suspends: `ended` closes it with `tiller.suspended`.

Trace context (DESIGN "one logical run is one trace"): the first segment of a top-level
run records in its `RunState.trace_context` the span every later segment goes under (the
first segment's parent, or the first segment itself) and its own span; a resumed segment
goes under the former and links to the latter, then records itself as the newest.

Telemetry never breaks, cancels or changes a run (DESIGN §4, laws 2 and 8): every hook
the loop calls catches what OpenTelemetry (a span processor, an exporter, a meter, the
user's redactor) raises, logs it (once a run as a warning, then at debug level) and goes
on; a span whose attributes failed is still ended, so none is left open.
"""

from __future__ import annotations

import functools
import logging
import sys
import time
from asyncio import CancelledError as _CancelledError
from collections.abc import AsyncIterator, Callable, Sequence
from typing import TYPE_CHECKING, Any, Concatenate, ParamSpec, TypeVar

import orjson
from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.trace import Link, SpanKind, Status, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from ..capture import ModelCallRecord
from ..conversation import AssistantMessage, ToolCall, Usage, UserMessage
from ..errors import Cancelled
from ..model import Finish, TextDelta, UsageReport
from ..state import RunState, TraceContext
from . import _names as n

if TYPE_CHECKING:
    from opentelemetry.context import Context
    from opentelemetry.trace import Span

    from ..model import Model, ModelRequest, StreamEvent
    from ._telemetry import Telemetry

__all__ = ["ChatSpan", "RunTrace", "context_of", "traceparent_of"]

_PROPAGATOR = TraceContextTextMapPropagator()
_logger = logging.getLogger("tiller.telemetry")

_P = ParamSpec("_P")
_Self = TypeVar("_Self", "RunTrace", "ChatSpan")


def _guarded(
    method: Callable[Concatenate[_Self, _P], None],
) -> Callable[Concatenate[_Self, _P], None]:
    """`method`, a hook the loop calls, never raising: what telemetry raises is logged
    (`RunTrace.failed`) and the run goes on as if it were not traced."""

    @functools.wraps(method)
    def hook(self: _Self, /, *args: _P.args, **kwargs: _P.kwargs) -> None:
        try:
            method(self, *args, **kwargs)
        except Exception:
            (self if isinstance(self, RunTrace) else self._run).failed(method.__name__)

    return hook


def traceparent_of(span: Span) -> str | None:
    """The W3C `traceparent` naming `span` (None for an invalid span)."""
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=trace.set_span_in_context(span))
    return carrier.get("traceparent")


def context_of(traceparent: str | None) -> Context | None:
    """The OpenTelemetry context `traceparent` names (None: none given, or not valid)."""
    if not traceparent:
        return None
    found = _PROPAGATOR.extract({"traceparent": traceparent})
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


def _link(traceparent: str | None) -> Link | None:
    found = context_of(traceparent)
    return None if found is None else Link(trace.get_current_span(found).get_span_context())


class RunTrace:
    """One run's recorder (see the module docstring)."""

    __slots__ = (
        "_agent",
        "_context",
        "_model",
        "_provider",
        "_span",
        "_state",
        "_subagent",
        "_telemetry",
        "_tools",
        "_warned",
    )

    def __init__(
        self,
        telemetry: Telemetry,
        state: RunState,
        *,
        agent: str,
        provider: str,
        model: str,
        subagent: bool,
    ) -> None:
        self._telemetry = telemetry
        self._state = state
        self._agent = agent
        self._provider = provider
        self._model = model
        self._subagent = subagent
        self._span: Span | None = None
        self._context: Context | None = None
        #: Open `execute_tool` spans by call id, with when the tool began to run.
        self._tools: dict[str, _ToolSpan] = {}
        self._warned = False

    def failed(self, hook: str) -> None:
        """A hook raised (called in its `except`): logged, a warning the first time in
        the run (a broken exporter fails on every span), then at debug level."""
        level = logging.DEBUG if self._warned else logging.WARNING
        self._warned = True
        _logger.log(
            level,
            "telemetry failed in %s of run %s; the run goes on untraced there",
            hook,
            self._state.run_id,
            exc_info=True,
        )

    # ── the run ──────────────────────────────────────────────────────────────────

    @_guarded
    def started(self) -> None:
        tel, state = self._telemetry, self._state
        recorded = state.trace_context if not self._subagent else None
        links: list[Link] = []
        given = context_of(tel.parent)
        if recorded is not None:  # a resumed segment: one logical run, one trace
            parent = context_of(recorded.parent)
            for link in (_link(recorded.previous), _link(tel.parent)):
                if link is not None:
                    links.append(link)
        else:
            parent = given
        if parent is None:
            parent = otel_context.get_current()
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.INVOKE_AGENT,
            n.PROVIDER_NAME: self._provider,
            n.AGENT_NAME: self._agent,
            n.AGENT_ID: state.run_id,
            n.REQUEST_MODEL: self._model,
            n.RUN_ID: state.run_id,
            n.THREAD_ID: state.thread_id,
        }
        if state.thread_id:
            attributes[n.CONVERSATION_ID] = state.thread_id
        if recorded is not None:
            attributes[n.RESUMED] = True
        if self._subagent:
            attributes[n.SUBAGENT] = True
        span = tel._instruments.tracer.start_span(
            f"{n.INVOKE_AGENT} {self._agent}",
            context=parent,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
            links=links,
        )
        self._span = span
        self._context = trace.set_span_in_context(span, parent)
        if self._subagent:
            return
        own = traceparent_of(span)
        if own is None:  # a no-op provider: nothing to continue
            return
        if recorded is not None:
            state.trace_context = TraceContext(parent=recorded.parent, previous=own)
        else:
            above = trace.get_current_span(parent).get_span_context()
            under = traceparent_of(trace.get_current_span(parent)) if above.is_valid else own
            state.trace_context = TraceContext(parent=under or own, previous=own)

    @_guarded
    def ended(self) -> None:
        """The run ended: called from the loop's `finally`, where the exception that
        ends it, if one does, is the one being handled."""
        exc = sys.exc_info()[1]
        span, state = self._span, self._state
        if span is None:
            return
        self._span = None
        cancelled = isinstance(exc, Cancelled | _CancelledError)
        cause = state.stop_cause.value if state.stop_cause is not None else None
        if cause is None:
            cause = "cancelled" if cancelled or exc is None else "error"
        suspended = cause == "suspended"
        while self._tools:  # each ends, whatever the one before it raised
            _, open_ = self._tools.popitem()
            try:
                open_.end(suspended=suspended, cancelled=cancelled)
            except Exception:
                self.failed("ended")
        try:
            self._describe_end(span, exc, cause, cancelled=cancelled, suspended=suspended)
        finally:
            span.end()  # even when an attribute failed: no span is left open
        self._telemetry._instruments.runs.add(
            1, {n.STOP_CAUSE: cause, n.AGENT_NAME: self._agent, n.SUBAGENT: self._subagent}
        )

    def _describe_end(
        self,
        span: Span,
        exc: BaseException | None,
        cause: str,
        *,
        cancelled: bool,
        suspended: bool,
    ) -> None:
        state = self._state
        usage = state.usage
        span.set_attributes(
            {
                n.STOP_CAUSE: cause,
                n.STEPS: state.step,
                n.USAGE_INPUT_TOKENS: usage.input_tokens,
                n.USAGE_OUTPUT_TOKENS: usage.output_tokens,
                n.COST_USD: state.cost_usd,
                n.USAGE_COMPLETE: state.usage_complete,
                n.BUDGET_SPENT_STEPS: state.step,
                n.BUDGET_SPENT_TOKENS: usage.input_tokens + usage.output_tokens,
                n.BUDGET_SPENT_COST_USD: state.cost_usd,
                n.TAINT: _taint_names(state),
                n.COMPACTIONS: state.compaction.compactions,
                n.SUSPENDED: suspended,
                n.INTERRUPTS: len(state.interrupts),
            }
        )
        # An error's text may quote the model's answer, a tool's output or the request
        # (a provider echoing it): it is content, recorded only when opted in.
        error = self.said(state.error)
        if error:
            span.set_attribute(n.ERROR, error)
        if exc is not None and not cancelled:
            kind = type(exc).__qualname__
            span.set_attribute(n.ERROR_TYPE, kind)
            span.set_status(Status(StatusCode.ERROR, self.said(str(exc)) or kind))
        elif cause == "error":
            span.set_attribute(n.ERROR_TYPE, "run_failed")
            span.set_status(Status(StatusCode.ERROR, error or "the run failed"))

    def said(self, text: str | None) -> str | None:
        """`text` (an error's, which may quote messages) as recorded: through the
        redactor when content is recorded, else None (not recorded)."""
        tel = self._telemetry
        if not text or not tel.record_content:
            return None
        return _content(lambda: _redacted_text(tel, self._state, text))

    # ── model calls ──────────────────────────────────────────────────────────────

    def chat(self, request: ModelRequest, *, purpose: str | None = None) -> ChatSpan:
        """A `chat` span for one model call of the run's (`purpose`: why, when it is not
        a turn of the run, such as `compaction`)."""
        return ChatSpan(self, request, purpose=purpose)

    def traced_model(self, model: Model, purpose: str) -> Model:
        """`model`, each of its calls in a `chat` span (for calls the loop makes outside
        a turn: the compaction summary)."""
        return _TracedModel(self, model, purpose)

    @_guarded
    def compacted(self, reason: str, before: int, after: int) -> None:
        """The history was compacted (`reason`: threshold or overflow), from about
        `before` to `after` tokens: an event on the run's span."""
        if self._span is not None:
            self._span.add_event(
                n.COMPACTION_EVENT,
                {
                    n.COMPACTION_REASON: reason,
                    n.COMPACTION_BEFORE: before,
                    n.COMPACTION_AFTER: after,
                },
            )

    # ── tool calls ───────────────────────────────────────────────────────────────

    @_guarded
    def tool_opened(self, call: ToolCall, *, known: bool = True) -> None:
        """`call` comes to the gate (or is answered from its record). `known`: it names
        one of the agent's tools; else the name is only what the model wrote (free
        text, content), and the span is `execute_tool` with no tool name."""
        if call.id in self._tools:
            return
        attributes: dict[str, Any] = {
            n.OPERATION_NAME: n.EXECUTE_TOOL,
            n.TOOL_CALL_ID: call.id,
            n.TOOL_TYPE: "function",
        }
        if known:
            attributes[n.TOOL_NAME] = call.name
        tel = self._telemetry
        if tel.record_content:
            arguments = _content(lambda: _redacted_arguments(tel, self._state, call))
            if arguments is not None:
                attributes[n.TOOL_CALL_ARGUMENTS] = arguments
        span = tel._instruments.tracer.start_span(
            f"{n.EXECUTE_TOOL} {call.name}" if known else n.EXECUTE_TOOL,
            context=self._context,
            kind=SpanKind.INTERNAL,
            attributes=attributes,
        )
        self._tools[call.id] = _ToolSpan(self, span, call.name)

    @_guarded
    def tool_gated(self, call_id: str, decision: str, by: str | None, risk: str | None) -> None:
        """The gate's answer: `decision` (run, refuse, hold, stage, client), who gave it."""
        open_ = self._tools.get(call_id)
        if open_ is None:
            return
        facts: dict[str, Any] = {n.GATE_DECISION: decision}
        if by is not None:
            facts[n.GATE_DECIDED_BY] = by
        if risk is not None:
            facts[n.RISK_CLASS] = risk
        open_.span.set_attributes(facts)

    @_guarded
    def tool_recorded(self, call_id: str) -> None:
        """Answered from the run's records (it ran before a suspension or a crash)."""
        open_ = self._tools.get(call_id)
        if open_ is not None:
            open_.span.set_attribute(n.TOOL_ANSWERED_FROM_RECORD, True)

    def tool_running(self, call_id: str) -> object:
        """The tool begins to run: its span becomes the current one (a subagent, or the
        tool's own instrumentation, nests under it). Returns what `tool_stopped` takes
        (None: nothing to undo)."""
        try:
            open_ = self._tools.get(call_id)
            if open_ is None:
                return None
            open_.began = time.perf_counter()
            return otel_context.attach(trace.set_span_in_context(open_.span, self._context))
        except Exception:
            self.failed("tool_running")
            return None

    @_guarded
    def tool_stopped(self, token: object) -> None:
        if token is not None:
            otel_context.detach(token)  # type: ignore[arg-type]

    @_guarded
    def tool_closed(self, call_id: str, content: str, *, is_error: bool) -> None:
        """The call is answered (`content`): its span ends."""
        open_ = self._tools.pop(call_id, None)
        if open_ is None:
            return
        span = open_.span
        try:
            span.set_attribute(n.TOOL_IS_ERROR, is_error)
            tel = self._telemetry
            if tel.record_content:
                result = _content(
                    lambda: _redacted_result(
                        tel, self._state, call_id, open_.name, content, is_error=is_error
                    )
                )
                if result is not None:
                    span.set_attribute(n.TOOL_CALL_RESULT, result)
            if is_error:
                span.set_attribute(n.ERROR_TYPE, "tool_error")
                span.set_status(Status(StatusCode.ERROR))
        finally:
            open_.end(suspended=False, cancelled=False)


class _ToolSpan:
    __slots__ = ("began", "name", "span", "trace")

    def __init__(self, run: RunTrace, span: Span, name: str) -> None:
        self.trace, self.span, self.name = run, span, name
        self.began: float | None = None

    def end(self, *, suspended: bool, cancelled: bool) -> None:
        try:
            if suspended:
                self.span.set_attribute(n.SUSPENDED, True)
            elif cancelled:
                self.span.set_attribute(n.ERROR_TYPE, "cancelled")
        finally:
            self.span.end()
        if self.began is not None:
            self.trace._telemetry._instruments.tool_duration.record(
                time.perf_counter() - self.began, {n.TOOL_NAME: self.name}
            )


class ChatSpan:
    """One model call's `chat` span; `done(response)` or `failed(exc)` ends it (once:
    the first of them does). None of the three raises."""

    __slots__ = ("_began", "_metric", "_run", "_span")

    def __init__(self, run: RunTrace, request: ModelRequest, *, purpose: str | None = None) -> None:
        self._run = run
        self._span: Span | None = None
        self._metric = {
            n.OPERATION_NAME: n.CHAT,
            n.PROVIDER_NAME: run._provider,
            n.REQUEST_MODEL: run._model,
        }
        self._began = time.perf_counter()
        self._open(request, purpose)

    @_guarded
    def _open(self, request: ModelRequest, purpose: str | None) -> None:
        run = self._run
        tel = run._telemetry
        attributes: dict[str, Any] = dict(self._metric)
        if purpose is not None:
            attributes[n.PURPOSE] = purpose
        if request.max_tokens is not None:
            attributes[n.REQUEST_MAX_TOKENS] = request.max_tokens
        if request.temperature is not None:
            attributes[n.REQUEST_TEMPERATURE] = request.temperature
        if tel.record_content:
            messages = _content(lambda: _redacted_input(tel, run._state, request))
            if messages is not None:
                attributes[n.INPUT_MESSAGES] = messages
            system = _content(lambda: _redacted_system(tel, run._state, request))
            if system is not None:
                attributes[n.SYSTEM_INSTRUCTIONS] = system
        self._span = tel._instruments.tracer.start_span(
            f"{n.CHAT} {run._model}",
            context=run._context,
            kind=SpanKind.CLIENT,
            attributes=attributes,
        )

    @_guarded
    def done(
        self,
        usage: Usage | None,
        finish_reason: str | None,
        message: AssistantMessage,
        response_model: str | None = None,
    ) -> None:
        """The call answered. `response_model`: the model that did, when the provider said
        (the conventions want `gen_ai.response.model` only if it is known: never the
        request's model standing in for it)."""
        run, span = self._run, self._span
        if span is None:
            return
        self._span = None
        tel = run._telemetry
        usage = usage or Usage()
        try:
            facts: dict[str, Any] = {
                n.USAGE_INPUT_TOKENS: usage.input_tokens,
                n.USAGE_OUTPUT_TOKENS: usage.output_tokens,
                n.RUN_CALL: run._state.model_calls,
            }
            if response_model:
                facts[n.RESPONSE_MODEL] = response_model
            if finish_reason is not None:
                facts[n.RESPONSE_FINISH_REASONS] = (str(finish_reason),)
            if usage.cached_input_tokens:
                facts[n.USAGE_CACHE_READ_INPUT_TOKENS] = usage.cached_input_tokens
            if usage.reasoning_tokens:
                facts[n.USAGE_REASONING_OUTPUT_TOKENS] = usage.reasoning_tokens
            if tel.record_content:
                output = _content(lambda: _redacted_output(tel, run._state, message, finish_reason))
                if output is not None:
                    facts[n.OUTPUT_MESSAGES] = output
            span.set_attributes(facts)
        finally:
            span.end()
        metric = dict(self._metric)
        if response_model:
            metric[n.RESPONSE_MODEL] = response_model
        ins = tel._instruments
        ins.operation_duration.record(time.perf_counter() - self._began, metric)
        ins.token_usage.record(usage.input_tokens, {**metric, n.TOKEN_TYPE: n.TOKEN_TYPE_INPUT})
        ins.token_usage.record(usage.output_tokens, {**metric, n.TOKEN_TYPE: n.TOKEN_TYPE_OUTPUT})

    @_guarded
    def failed(self, exc: BaseException) -> None:
        span = self._span
        if span is None:
            return
        self._span = None
        kind = (
            "cancelled" if isinstance(exc, Cancelled | _CancelledError) else type(exc).__qualname__
        )
        try:
            span.set_attribute(n.ERROR_TYPE, kind)
            if kind != "cancelled":
                span.set_status(Status(StatusCode.ERROR, self._run.said(str(exc)) or kind))
        finally:
            span.end()
        metric = {**self._metric, n.ERROR_TYPE: kind}
        self._run._telemetry._instruments.operation_duration.record(
            time.perf_counter() - self._began, metric
        )


class _TracedModel:
    """A model whose every call is a `chat` span of `run` (usage and finish reason read
    from its stream)."""

    __slots__ = ("_model", "_purpose", "_run", "context_window", "name", "provider")

    def __init__(self, run: RunTrace, model: Model, purpose: str) -> None:
        self._run, self._model, self._purpose = run, model, purpose
        self.provider, self.name = model.provider, model.name
        self.context_window = model.context_window

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        chat = self._run.chat(request, purpose=self._purpose)
        usage: Usage | None = None
        finish: str | None = None
        answered_by: str | None = None
        text: list[str] = []
        try:
            async for event in self._model.stream(request):
                if isinstance(event, UsageReport):
                    usage = event.usage
                elif isinstance(event, Finish):
                    finish, answered_by = str(event.reason), event.model
                elif isinstance(event, TextDelta):
                    text.append(event.text)
                yield event
        except BaseException as exc:
            chat.failed(exc)
            raise
        chat.done(usage, finish, AssistantMessage(text="".join(text)), answered_by)

    async def aclose(self) -> None:
        await self._model.aclose()


# ── content, through the capture redactor ────────────────────────────────────────────


def _taint_names(state: RunState) -> Sequence[str]:
    flags = state.taint_flags
    return tuple(sorted(str(name).lower() for name in _flag_names(flags)))


def _flag_names(flags: Any) -> list[str]:
    names: list[str] = []
    for member in type(flags):
        if member.value and member in flags and member.name is not None:
            names.append(member.name)
    return names


_Shaped = TypeVar("_Shaped")


def _content(shape: Callable[[], _Shaped | None]) -> _Shaped | None:
    """`shape()`: content as recorded, or None (not recorded) when shaping it fails, as
    when the redactor returns what no longer reads as a message."""
    try:
        return shape()
    except Exception:
        _logger.debug("message content could not be recorded; it is left out", exc_info=True)
        return None


def _json(value: Any) -> str:
    return orjson.dumps(value).decode()


def _parts(message: UserMessage | AssistantMessage) -> dict[str, Any]:
    """A message in the GenAI conventions' message shape (`role`, `parts`)."""
    parts: list[dict[str, Any]] = []
    if isinstance(message, UserMessage):
        for result in message.tool_results:
            parts.append(
                {"type": "tool_call_response", "id": result.call_id, "response": result.content}
            )
        if message.text:
            parts.append({"type": "text", "content": message.text})
        role = "tool" if message.tool_results and not message.text else "user"
        return {"role": role, "parts": parts}
    if message.text:
        parts.append({"type": "text", "content": message.text})
    for call in message.tool_calls:
        parts.append(
            {"type": "tool_call", "id": call.id, "name": call.name, "arguments": call.arguments}
        )
    return {"role": "assistant", "parts": parts}


def _redact(tel: Telemetry, record: ModelCallRecord) -> ModelCallRecord | None:
    if tel.redact is None:
        return record
    try:
        out = tel.redact(record)
    except Exception:  # a failing redactor drops the content, never records it raw
        return None
    return out if isinstance(out, ModelCallRecord) else None


def _record(
    state: RunState,
    messages: list[dict[str, Any]],
    response: dict[str, Any],
    *,
    agent: dict[str, Any] | None = None,
) -> ModelCallRecord:
    return ModelCallRecord(
        run_id=state.run_id, step=state.step, new_messages=messages, response=response, agent=agent
    )


def _redacted_input(tel: Telemetry, state: RunState, request: ModelRequest) -> str | None:
    dumped = [m.model_dump(mode="json") for m in request.messages]
    record = _redact(tel, _record(state, dumped, {}))
    if record is None:
        return None
    return _json([_parts(_load(m)) for m in record.new_messages])


def _redacted_system(tel: Telemetry, state: RunState, request: ModelRequest) -> str | None:
    """The system prompt, as the redactor sees it in a capture: the record's `agent`."""
    if not request.system:
        return None
    record = _redact(tel, _record(state, [], {}, agent={"system": request.system}))
    if record is None or not record.agent or not record.agent.get("system"):
        return None
    return _json([{"type": "text", "content": str(record.agent["system"])}])


def _redacted_output(
    tel: Telemetry, state: RunState, message: AssistantMessage, finish_reason: str | None
) -> str | None:
    record = _redact(tel, _record(state, [], message.model_dump(mode="json")))
    if record is None:
        return None
    shaped = _parts(AssistantMessage.model_validate(record.response))
    shaped["finish_reason"] = str(finish_reason or "")
    return _json([shaped])


def _redacted_text(tel: Telemetry, state: RunState, text: str) -> str | None:
    """Free text the run wrote (an error), as the redactor sees a completion's."""
    response = AssistantMessage(text=text).model_dump(mode="json")
    record = _redact(tel, _record(state, [], response))
    if record is None:
        return None
    return AssistantMessage.model_validate(record.response).text or None


def _redacted_arguments(tel: Telemetry, state: RunState, call: ToolCall) -> str | None:
    """A call's arguments, as the redactor sees them in a capture: inside the
    assistant message that made the call."""
    response = AssistantMessage(tool_calls=(call,)).model_dump(mode="json")
    record = _redact(tel, _record(state, [], response))
    if record is None:
        return None
    calls = AssistantMessage.model_validate(record.response).tool_calls
    return calls[0].arguments if calls else None


def _redacted_result(
    tel: Telemetry, state: RunState, call_id: str, name: str, content: str, *, is_error: bool
) -> str | None:
    from ..capture import ToolResultRecord

    record: Any = ToolResultRecord(
        run_id=state.run_id,
        step=state.step,
        call_id=call_id,
        name=name,
        content=content,
        is_error=is_error,
    )
    if tel.redact is not None:
        try:
            record = tel.redact(record)
        except Exception:
            return None
    return record.content if isinstance(record, ToolResultRecord) else None


def _load(message: dict[str, Any]) -> UserMessage | AssistantMessage:
    if message.get("role") == "assistant":
        return AssistantMessage.model_validate(message)
    return UserMessage.model_validate(message)

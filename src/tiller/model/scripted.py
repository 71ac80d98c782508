"""`ScriptedModel`: the offline model that agents are tested with (product code, not a mock).

A script is a list of turns, one per model call, or a function that writes each turn when
asked. A turn is plain data, so scripts live happily in YAML next to the tests:

```yaml
name: weather-bot            # optional: name, context_window, when_exhausted, per_run
turns:
  - tool_calls:
      - {name: get_weather, arguments: {city: Paris}}
  - text: It is sunny in Paris.
    usage: {input_tokens: 120, output_tokens: 9}
  - error: {status: 429, retry_after: 1}     # the next call fails (stream_with_retry retries)
  - "A bare string is a text turn."
```

The stream it produces is shaped like a real provider's, so consumers exercise the same code
paths: text arrives word by word (or in the `chunks` given), tool call arguments arrive in a
few fragments, usage is reported, and every stream ends with `Finish`. Nothing depends on
time or chance: the call ids it streams are `call-{turn}-{index}` (turns count from 1,
indexes from 0, as in the stream; they are the "provider's" ids: the loop gives each call
the run's own), and usage defaults to an estimate from the text lengths.

A script is replayed per run: the turn a call gets is its number in its run
(`ModelRequest.run_call`, which the loop sets and checkpoints), so one module-level
scripted agent serves request after request, concurrent runs each from turn 1, and a
resumed run goes on where it stopped. `per_run=False` keeps one position on the model
across every run (the behaviour before issue 18), for a script written as one sequence
over several runs. A request made outside a run (no `run_call`) takes the model's own
next turn either way.
"""

from __future__ import annotations

import asyncio
import inspect
import math
import re
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Final, Literal, TypeAlias, get_args

import orjson
import pydantic

from .. import _public
from ..conversation import AssistantMessage, Reasoning, Usage, UserMessage
from ..errors import UsageError
from ._base import (
    Finish,
    FinishReason,
    ModelRequest,
    ReasoningDelta,
    StreamEvent,
    TextDelta,
    ToolCallArgsDelta,
    ToolCallEnd,
    ToolCallStart,
    ToolSpec,
    UsageReport,
)
from ._errors import (
    ContextOverflow,
    ModelConnectionError,
    ModelError,
    ModelHTTPError,
    ModelProtocolError,
    ModelTimeout,
)

__all__ = [
    "ScriptedModel",
    "Turn",
    "TurnCall",
    "TurnError",
    "TurnFunction",
    "TurnInfo",
    "TurnLike",
]

ErrorKind = Literal["http", "timeout", "connection", "protocol", "context_overflow"]
#: What the model does when the script has no more turns: fail (the default, so a test
#: notices an unexpected extra call), repeat the last turn, or answer "done".
WhenExhausted = Literal["error", "repeat", "done"]

_FINISH_REASONS: frozenset[str] = frozenset(get_args(FinishReason))
_ERROR_KINDS: frozenset[str] = frozenset(get_args(ErrorKind))
_WORDS = re.compile(r"\s*\S+|\s+$")
_ARG_FRAGMENTS = 3
_PROVIDER = "scripted"


@dataclass(slots=True, frozen=True)
class TurnCall:
    """A tool call in a turn. `arguments` is an object, or raw JSON text sent verbatim
    (raw text lets a script send arguments that are not JSON); `id` is the provider's id
    the call is streamed with, `call-{turn}-{index}` when unset (a script may give the same
    id twice, or `""`, as some providers do: the loop gives every call the run's own id)."""

    name: str
    arguments: Mapping[str, Any] | str = field(default_factory=dict)
    id: str | None = None

    def arguments_text(self) -> str:
        if isinstance(self.arguments, str):
            return self.arguments
        return orjson.dumps(dict(self.arguments)).decode()


@dataclass(slots=True, frozen=True)
class TurnError:
    """An error the turn raises instead of finishing.

    With `status`, a `ModelHTTPError` (429 and 5xx retryable, as from a provider); with
    `kind`, a `ModelTimeout`, `ModelConnectionError`, `ModelProtocolError` or
    `ContextOverflow`. A new exception is built for every call that raises it.
    """

    status: int | None = None
    kind: ErrorKind = "http"
    message: str = "scripted error"
    retry_after: float | None = None

    def __post_init__(self) -> None:
        if self.kind not in _ERROR_KINDS:
            raise UsageError(f"error kind {self.kind!r} is not one of {sorted(_ERROR_KINDS)}")
        if self.kind == "http" and self.status is None:
            raise UsageError("an error needs a `status` (HTTP) or a `kind`")

    def build(self) -> ModelError:
        provider = _PROVIDER
        if self.kind == "timeout":
            return ModelTimeout(self.message, retry_after=self.retry_after, provider=provider)
        if self.kind == "connection":
            return ModelConnectionError(
                self.message, retry_after=self.retry_after, provider=provider
            )
        if self.kind == "protocol":
            return ModelProtocolError(self.message, provider=provider)
        if self.kind == "context_overflow":
            return ContextOverflow(self.message, provider=provider, status=self.status or 400)
        assert self.status is not None  # checked in __post_init__
        return ModelHTTPError(
            self.status, self.message, retry_after=self.retry_after, provider=provider
        )


@dataclass(slots=True, frozen=True)
class Turn:
    """One scripted model response. Events stream in this order: `delay`, reasoning, text,
    tool calls, usage, `Finish`.

    With `error`, the text and reasoning stream, the tool calls start and send their
    arguments but never end (the connection died mid-call: law 1 drops them), and then the
    error is raised in place of usage and `Finish`. A turn with only an error fails before
    its first event, which is the case `stream_with_retry` retries.
    """

    text: str = ""
    #: How the text is split into deltas; by default word by word. Sets `text` if empty.
    chunks: tuple[str, ...] | None = None
    reasoning: tuple[Reasoning, ...] = ()
    tool_calls: tuple[TurnCall, ...] = ()
    #: Reported as is; by default estimated from the lengths (4 characters a token).
    usage: Usage | None = None
    #: By default `tool_calls` if the turn has any, else `stop`.
    finish: FinishReason | None = None
    error: TurnError | None = None
    #: Seconds to wait (with `asyncio.sleep`, so a cancel interrupts it) before streaming.
    delay: float = 0.0

    def __post_init__(self) -> None:
        # Frozen, but normalized once here so that lists given by hand behave like tuples.
        if self.chunks is not None:
            chunks = tuple(self.chunks)
            object.__setattr__(self, "chunks", chunks)
            joined = "".join(chunks)
            if not self.text:
                object.__setattr__(self, "text", joined)
            elif joined != self.text:
                raise UsageError("`chunks` must join up to `text` (or leave `text` out)")
        if type(self.reasoning) is not tuple:
            object.__setattr__(self, "reasoning", tuple(self.reasoning))
        if type(self.tool_calls) is not tuple:
            object.__setattr__(self, "tool_calls", tuple(self.tool_calls))
        if self.finish is not None and self.finish not in _FINISH_REASONS:
            raise UsageError(f"finish {self.finish!r} is not one of {sorted(_FINISH_REASONS)}")
        if self.delay < 0:
            raise UsageError(f"delay must not be negative, not {self.delay}")

    @classmethod
    def parse(cls, value: TurnLike) -> Turn:
        """A turn from a string (its text), a mapping with the field names, or a `Turn`."""
        return cls._parse(value, None)

    @classmethod
    def _parse(cls, value: TurnLike, usages: _Usages | None) -> Turn:
        """`parse`, looking usages up in `usages` (`_parse_usage`) when given."""
        if isinstance(value, Turn):
            return value
        if isinstance(value, str):
            return cls(text=value)
        if not _is_mapping(value):
            raise UsageError(
                f"a turn is a string or a mapping, not {type(value).__name__}: {value!r}"
            )
        if not _TURN_KEYS.issuperset(value):
            unknown = sorted(set(value) - _TURN_KEYS)
            raise UsageError(f"unknown key(s) {unknown}; a turn may have {sorted(_TURN_KEYS)}")
        # (A turn function writes one turn a step: the keys it leaves out cost nothing.)
        get = value.get
        chunks, reasoning = get("chunks"), get("reasoning")
        calls, delay = get("tool_calls", _ABSENT), get("delay", _ABSENT)
        return cls(
            text=_typed(value, "text", str, ""),
            chunks=None if chunks is None else tuple(_str_list(chunks, "chunks")),
            reasoning=() if reasoning is None else _parse_reasoning(reasoning),
            tool_calls=()
            if calls is _ABSENT
            else tuple(_parse_call(call) for call in _list(calls, "tool_calls")),
            usage=_parse_usage(get("usage"), usages),
            finish=_typed(value, "finish", str, None),
            error=_parse_error(get("error")),
            delay=0.0 if delay is _ABSENT else float(_typed(value, "delay", (int, float), 0.0)),
        )


_FILE_SETTINGS = frozenset({"name", "context_window", "when_exhausted", "per_run"})
_TURN_KEYS = frozenset(
    {"text", "chunks", "reasoning", "tool_calls", "usage", "finish", "error", "delay"}
)
_CALL_KEYS = frozenset({"name", "arguments", "id"})
#: A key the turn does not have (`None` is a value, and refused where it is not one).
_ABSENT: Final = object()

#: A turn as a script writes it: text, a mapping of `Turn`'s fields, or a `Turn`.
TurnLike: TypeAlias = str | Mapping[str, Any] | Turn


@dataclass(slots=True, frozen=True)
class TurnInfo:
    """What a turn function learns besides the messages: the turn number (from 1, counted
    in the request's run unless the model has `per_run=False`) and the whole request."""

    turn: int
    request: ModelRequest

    @property
    def run_id(self) -> str | None:
        """The run the call is part of (None outside a run)."""
        return self.request.run_id

    @property
    def system(self) -> str | None:
        return self.request.system

    @property
    def tools(self) -> Sequence[ToolSpec]:
        return self.request.tools

    @property
    def max_tokens(self) -> int | None:
        return self.request.max_tokens


#: `(messages, info) -> turn`, sync or async; or an async generator of text chunks, which
#: are streamed as they are produced.
TurnFunction: TypeAlias = Callable[
    [Sequence[UserMessage | AssistantMessage], TurnInfo],
    TurnLike | Awaitable[TurnLike] | AsyncIterator[str],
]


class ScriptedModel:
    """A `Model` that answers from a script instead of a provider.

    ```python
    model = ScriptedModel([
        {"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]},
        "1 + 2 = 3",
    ])
    model = ScriptedModel.from_file("tests/scripts/add.yaml")
    model = ScriptedModel(lambda messages, info: f"turn {info.turn}")
    ```

    Each run plays the script from its first turn (`per_run=False`: one position across
    all runs). Every request is recorded (`requests`, `last_request`) for assertions, from
    every run. When the script runs out, the next call raises a `ModelError` by default;
    `when_exhausted="repeat"` repeats the last turn and `"done"` answers "done". Errors
    raised by a turn function propagate untouched, so a test sees its own bug
    (`stream_with_retry` wraps them in a `ModelError` like any adapter's).
    """

    __test__: ClassVar[bool] = False  # not a pytest test class, despite the name

    def __init__(
        self,
        turns: Iterable[TurnLike] | TurnLike | TurnFunction = (),
        *,
        name: str = "scripted",
        context_window: int | None = None,
        when_exhausted: WhenExhausted = "error",
        per_run: bool = True,
    ) -> None:
        if when_exhausted not in get_args(WhenExhausted):
            raise UsageError(
                f"when_exhausted must be one of {list(get_args(WhenExhausted))}, "
                f"not {when_exhausted!r}"
            )
        if not isinstance(per_run, bool):
            raise UsageError(f"per_run must be true or false, not {per_run!r}")
        self.provider = _PROVIDER
        self.name = name
        self.context_window = context_window
        self.when_exhausted: WhenExhausted = when_exhausted
        #: Whether each run plays the script from its turn 1 (see the module docstring).
        self.per_run = per_run
        self.requests: list[ModelRequest] = []
        #: Calls answered by the model's own position: all of them with `per_run=False`,
        #: else those made outside a run.
        self._shared_calls = 0
        self._function: TurnFunction | None = None
        self._turns: tuple[Turn, ...] = ()
        #: Counts the input of each run's requests, incrementally (`_InputEstimate`).
        self._input = _InputEstimate()
        #: The usages the turn function gave, parsed once each (`_parse_usage`).
        self._usages: _Usages = {}
        if isinstance(turns, str | Mapping | Turn):
            turns = [turns]
        if callable(turns):
            self._function = turns
        else:
            parsed: list[Turn] = []
            for number, turn in enumerate(turns, start=1):
                try:
                    parsed.append(Turn.parse(turn))
                except UsageError as exc:
                    raise UsageError(f"turn {number}: {exc}") from None
            self._turns = tuple(parsed)

    @classmethod
    def from_file(cls, path: str | Path, **options: Any) -> ScriptedModel:
        """Load a script from YAML (`.yaml`, `.yml`) or JSON (`.json`; anything else is
        read as YAML, which JSON is nearly a subset of).

        The file holds a list of turns, or a mapping with `turns` and optionally `name`,
        `context_window`, `when_exhausted` and `per_run`; keyword `options` override the
        file's.
        The name defaults to the file's stem.
        """
        path = Path(path)
        try:
            source = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot read the model script {str(path)!r}: {exc}") from exc
        try:
            if path.suffix.lower() == ".json":
                data = orjson.loads(source)
            else:
                import yaml  # lazily: only scripts need it, and `import tiller` stays fast

                try:
                    data = yaml.safe_load(source)
                except yaml.YAMLError as exc:
                    raise UsageError(f"{path}: not valid YAML: {exc}") from exc
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{path}: not valid JSON: {exc}") from exc
        settings: dict[str, Any] = {"name": path.stem}
        if isinstance(data, Mapping):
            unknown = sorted(set(data) - _FILE_SETTINGS - {"turns"})
            if unknown or "turns" not in data:
                raise UsageError(
                    f"{path}: a script is a list of turns, or a mapping with `turns` and "
                    f"optionally `name`, `context_window`, `when_exhausted`, `per_run` (got keys "
                    f"{sorted(data)})"
                )
            settings.update({k: v for k, v in data.items() if k != "turns"})
            data = data["turns"]
        if not isinstance(data, list):
            raise UsageError(f"{path}: a script is a list of turns, not {type(data).__name__}")
        settings.update(options)
        try:
            return cls(data, **settings)
        except UsageError as exc:
            raise UsageError(f"{path}: {exc}") from None

    @classmethod
    def echo(cls, *, name: str = "echo") -> ScriptedModel:
        """A model that answers every call with the last user message's text: the smallest
        agent that round-trips, for smoke tests of the plumbing around a model."""

        def reply(messages: Sequence[UserMessage | AssistantMessage], info: TurnInfo) -> str:
            for message in reversed(messages):
                if isinstance(message, UserMessage) and message.text:
                    return message.text
            return "(nothing to echo)"

        return cls(reply, name=name)

    @property
    def last_request(self) -> ModelRequest | None:
        return self.requests[-1] if self.requests else None

    @property
    def turns(self) -> tuple[Turn, ...]:
        """The parsed script (empty for a turn function)."""
        return self._turns

    async def stream(self, request: ModelRequest) -> AsyncIterator[StreamEvent]:
        """Answer `request` with the next turn of the script."""
        self.requests.append(request)
        number = self._turn_number(request)
        if self._function is None:
            turn = self._next_turn(number)
        else:
            result = self._function(request.messages, TurnInfo(number, request))
            if type(result) not in _PLAIN_TURNS:  # (plain data is neither: no checks)
                if inspect.isasyncgen(result):
                    async for event in _stream_chunks(result, request, self._input):
                        yield event
                    return
                if inspect.isawaitable(result):
                    result = await result
            if result is None:
                raise UsageError(
                    f"the turn function returned None for turn {number}; "
                    "return a string, a mapping or a Turn"
                )
            turn = Turn._parse(result, self._usages)  # type: ignore[arg-type]  # checked at runtime
        if turn.delay > 0:
            await asyncio.sleep(turn.delay)
        # The events are made here, in this one generator's frame: a turn is plain data.
        for event in _turn_events(turn, number, request, self._input):
            yield event

    def _turn_number(self, request: ModelRequest) -> int:
        """The turn this request gets: its number in its run, or the model's next."""
        if self.per_run and request.run_call is not None:
            return request.run_call
        self._shared_calls += 1
        return self._shared_calls

    def _next_turn(self, number: int) -> Turn:
        if number <= len(self._turns):
            return self._turns[number - 1]
        if self.when_exhausted == "repeat" and self._turns:
            return self._turns[-1]
        if self.when_exhausted == "done":
            return Turn(text="done")
        count = len(self._turns)
        raise ModelError(
            f"the script has no turn {number}; it has {count} turn{'' if count == 1 else 's'}",
            provider=self.provider,
        )

    async def aclose(self) -> None:
        """Nothing to release; here for the `Model` protocol."""

    async def __aenter__(self) -> ScriptedModel:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        script = "function" if self._function is not None else f"{len(self._turns)} turns"
        return f"ScriptedModel({self.name!r}, {script}, served={len(self.requests)})"


# -- streaming -------------------------------------------------------------------------


def _turn_events(
    turn: Turn, number: int, request: ModelRequest, estimate: _InputEstimate
) -> Iterator[StreamEvent]:
    """The turn's events, in order; a turn with an error raises it after its content."""
    for block in turn.reasoning:
        if block.text:
            yield ReasoningDelta(text=block.text)
        if block.signature is not None:
            yield ReasoningDelta(signature=block.signature)
        if block.redacted is not None:
            yield ReasoningDelta(redacted=block.redacted)
    for chunk in turn.chunks if turn.chunks is not None else _words(turn.text):
        yield TextDelta(chunk)
    output_chars = len(turn.text) + sum(len(block.text) for block in turn.reasoning)
    for index, call in enumerate(turn.tool_calls):
        provider_id = f"call-{number}-{index}" if call.id is None else call.id
        yield ToolCallStart(index, provider_id, call.name)
        arguments = call.arguments_text()
        output_chars += len(call.name) + len(arguments)
        for fragment in _fragments(arguments):
            yield ToolCallArgsDelta(index, fragment)
        if turn.error is None:
            yield ToolCallEnd(index)
    if turn.error is not None:
        raise turn.error.build()
    yield UsageReport(turn.usage or estimate.usage(request, output_chars))
    yield Finish(turn.finish or ("tool_calls" if turn.tool_calls else "stop"))


async def _stream_chunks(
    chunks: AsyncIterator[Any], request: ModelRequest, estimate: _InputEstimate
) -> AsyncIterator[StreamEvent]:
    written = 0
    try:
        async for chunk in chunks:
            if not isinstance(chunk, str):
                raise UsageError(
                    f"a turn generator yields text chunks (str), not {type(chunk).__name__}"
                )
            if chunk:
                written += len(chunk)
                yield TextDelta(chunk)
    finally:
        aclose = getattr(chunks, "aclose", None)
        if aclose is not None:
            await aclose()
    yield UsageReport(estimate.usage(request, written))
    yield Finish("stop")


def _words(text: str) -> list[str]:
    """Word by word, each with the whitespace before it; joins back to `text`."""
    return _WORDS.findall(text)


def _fragments(text: str) -> list[str]:
    """Up to three nearly equal pieces, so consumers must parse arguments incrementally."""
    if len(text) < _ARG_FRAGMENTS:
        return [text] if text else []
    size = math.ceil(len(text) / _ARG_FRAGMENTS)
    return [text[i : i + size] for i in range(0, len(text), size)]


def _tokens(chars: int) -> int:
    return math.ceil(chars / 4)


class _InputEstimate:
    """The usage estimate's input side, 4 characters a token, in time proportional to
    what is new: for each run (by `ModelRequest.run_id`) it keeps the messages of the
    run's last request and their characters, and a request that repeats them and adds
    some counts only the added ones. Whether the earlier messages are the ones counted
    is one comparison of the two lists (by identity first, as `==` on lists does), never
    a second reading of their content: a history rewritten anywhere (compaction thins a
    result in place, a window shortens it) fails it and is counted again in full, so the
    figures are always those of a full count.

    It remembers the last `_RUNS_KEPT` runs; an older one is counted in full again."""

    __slots__ = ("_seen",)

    def __init__(self) -> None:
        #: run id -> (the messages last counted, their characters).
        self._seen: dict[str | None, tuple[tuple[Any, ...], int]] = {}

    def usage(self, request: ModelRequest, output_chars: int) -> Usage:
        messages = tuple(request.messages)
        key = request.run_id
        seen = self._seen.pop(key, None)
        start = chars = 0
        if seen is not None:
            counted, counted_chars = seen
            size = len(counted)
            if size <= len(messages) and messages[:size] == counted:
                start, chars = size, counted_chars
        for index in range(start, len(messages)):
            chars += _message_chars(messages[index])
        if len(self._seen) >= _RUNS_KEPT:
            del self._seen[next(iter(self._seen))]  # the run heard from longest ago
        self._seen[key] = (messages, chars)
        chars += len(request.system or "")
        return Usage(input_tokens=_tokens(chars), output_tokens=_tokens(output_chars), requests=1)


#: Runs whose last request `_InputEstimate` remembers.
_RUNS_KEPT: Final = 1024


def _message_chars(message: UserMessage | AssistantMessage) -> int:
    if isinstance(message, AssistantMessage):
        return len(message.text) + sum(len(call.arguments) for call in message.tool_calls)
    return len(message.text) + sum(len(result.content) for result in message.tool_results)


# -- parsing ---------------------------------------------------------------------------


#: What a turn function returns most: plain data, which is never awaited or iterated.
_PLAIN_TURNS: Final = frozenset({dict, str, Turn})


def _is_mapping(value: Any) -> bool:
    """`isinstance(value, Mapping)`, without the ABC check for a plain dict."""
    return type(value) is dict or isinstance(value, Mapping)


def _typed(value: Mapping[str, Any], key: str, kind: Any, default: Any) -> Any:
    item = value.get(key, default)
    if item is default:
        return item
    if not isinstance(item, kind) or isinstance(item, bool):
        raise UsageError(f"`{key}` has the wrong type: {item!r}")
    return item


def _list(value: Any, key: str) -> list[Any]:
    if not isinstance(value, list | tuple):
        raise UsageError(f"`{key}` must be a list, not {type(value).__name__}")
    return list(value)


def _str_list(value: Any, key: str) -> list[str]:
    items = _list(value, key)
    if not all(isinstance(item, str) for item in items):
        raise UsageError(f"`{key}` must be a list of strings")
    return items


def _parse_reasoning(value: Any) -> tuple[Reasoning, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list | tuple) else [value]
    blocks: list[Reasoning] = []
    for item in items:
        if isinstance(item, str):
            blocks.append(Reasoning(text=item))
        elif isinstance(item, Mapping):
            try:
                blocks.append(Reasoning.model_validate(dict(item)))
            except pydantic.ValidationError as exc:
                raise UsageError(f"`reasoning`: {_first_error(exc)}") from None
        else:
            raise UsageError(f"`reasoning` is text or a mapping, not {item!r}")
    return tuple(blocks)


def _parse_call(value: Any) -> TurnCall:
    if isinstance(value, TurnCall):
        return value
    if not _is_mapping(value):
        raise UsageError(f"a tool call is a mapping with `name`, not {value!r}")
    if not _CALL_KEYS.issuperset(value):
        unknown = sorted(set(value) - _CALL_KEYS)
        raise UsageError(f"unknown tool call key(s) {unknown}; use name, arguments, id")
    name = value.get("name")
    if not isinstance(name, str) or not name:
        raise UsageError(f"a tool call needs a `name`: {dict(value)!r}")
    arguments = value.get("arguments", {})
    if arguments is None:
        arguments = {}
    if not isinstance(arguments, str) and not _is_mapping(arguments):
        raise UsageError(f"tool call {name!r}: `arguments` is a mapping or JSON text")
    call_id = value.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise UsageError(f"tool call {name!r}: `id` must be a string")
    return TurnCall(name=name, arguments=arguments, id=call_id)


def _parse_usage(value: Any, usages: _Usages | None = None) -> Usage | None:
    if value is None or isinstance(value, Usage):
        return value
    if not _is_mapping(value):
        raise UsageError(f"`usage` is a mapping of token counts, not {value!r}")
    key: tuple[tuple[Any, Any], ...] | None = None
    if usages is not None:
        # A turn function tends to report the same counts turn after turn: a usage it
        # gave before (a `Usage` is frozen) is looked up by its items, not validated again.
        try:
            key = tuple(value.items())
            known = usages.get(key)
        except TypeError:  # an item that cannot be hashed: validated (and refused) below
            key, known = None, None
        if known is not None:
            return known
    try:
        usage = Usage.model_validate({"requests": 1, **value})
    except pydantic.ValidationError as exc:
        raise UsageError(f"`usage`: {_first_error(exc)}") from None
    if usages is not None and key is not None:
        if len(usages) >= _USAGES_KEPT:
            usages.clear()
        usages[key] = usage
    return usage


#: Usages a turn function gave, by the items of the mapping it gave (`_parse_usage`).
_Usages: TypeAlias = dict[tuple[tuple[Any, Any], ...], Usage]
_USAGES_KEPT: Final = 64


def _parse_error(value: Any) -> TurnError | None:
    if value is None or isinstance(value, TurnError):
        return value
    if not isinstance(value, Mapping):
        raise UsageError(f"`error` is a mapping like {{status: 429}}, not {value!r}")
    unknown = sorted(set(value) - {"status", "kind", "message", "retry_after"})
    if unknown:
        raise UsageError(f"unknown error key(s) {unknown}; use status, kind, message, retry_after")
    status = _typed(value, "status", int, None)
    retry_after = _typed(value, "retry_after", (int, float), None)
    return TurnError(
        status=status,
        kind=_typed(value, "kind", str, "http"),
        message=_typed(value, "message", str, "scripted error"),
        retry_after=None if retry_after is None else float(retry_after),
    )


def _first_error(exc: pydantic.ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(part) for part in error["loc"])
    return f"{where}: {error['msg']}" if where else str(error["msg"])


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

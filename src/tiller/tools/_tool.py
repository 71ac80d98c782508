"""The `Tool` protocol, and `@tool`, which turns a typed function into one.

A tool is what the model may call: a name, a description and a JSON Schema it reads, and
an async `call(args, ctx)` that does the work. Most tools are plain functions:

```python
@tool(read_only=True)
def word_count(path: str, ctx: ExecContext) -> int:
    \"\"\"Count the words in a file of the workspace.

    Args:
        path: The file, relative to the workspace root.
    \"\"\"
    return len(ctx.jail.resolve(path).read_text().split())
```

The signature is the schema (pydantic builds and validates it), the docstring is the
description, and a parameter annotated `ExecContext` receives the call's context. A sync
function runs in a worker thread, so it never blocks the event loop; an async one is
awaited. What it returns becomes the result the model reads: a `str` as is, a
`ToolOutput` unchanged, anything else as JSON.

A tool signals an expected failure ("no such file") by raising `ToolError`: the model sees
the message as an error result and the run goes on. `ToolError` is a plain `Exception`,
not a `TillerError`, because it is a signal raised on purpose (STYLE.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import enum
import inspect
import re
import sys
import threading
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Annotated, Any, Final, Protocol, TypeVar, overload, runtime_checkable

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from pydantic.errors import PydanticSchemaGenerationError, PydanticUserError
from pydantic.fields import FieldInfo

from .. import _public
from ..errors import InvalidToolArguments
from ..model import ToolSpec
from ._docstring import parse_docstring
from ._errors import ToolDefinitionError
from ._exec import ExecContext, PendingContext, resolve_context
from ._risk_class import RiskClass

__all__ = [
    "ArgumentsReader",
    "TOOL_MEMBERS",
    "BaseTool",
    "Capability",
    "CapabilityViews",
    "FunctionTool",
    "Tool",
    "ToolError",
    "ToolOutput",
    "declared_risk",
    "missing_members",
    "path_argument",
    "tool",
]

_T = TypeVar("_T")

# What OpenAI and Anthropic both accept as a function name.
_NAME: Final = re.compile(r"^[A-Za-z0-9_-]{1,64}$")


class Capability(enum.Flag):
    """What a tool may do that matters to the lethal-trifecta interlock (DESIGN §11).

    The loop ORs the capabilities of a step's calls into the conversation's taint before
    gating them, so a read and a send in one step cannot slip through together.
    """

    NONE = 0
    #: Its output may contain the user's private data (files, mail, databases).
    PRIVATE_DATA = enum.auto()
    #: Its output may contain text from untrusted sources (web pages, issues, mail).
    UNTRUSTED_INPUT = enum.auto()
    #: It can send data out of the machine (HTTP requests, messages, pushes).
    EXTERNAL_SEND = enum.auto()
    #: It can destroy data irreversibly.
    DESTRUCTIVE = enum.auto()


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """What a tool call produced: `content` as the model reads it, whether it is an
    error, and optional structured `data` for the program (UI state, tests) that the
    model does not see."""

    content: str
    is_error: bool = False
    data: Any = None


class ToolError(Exception):
    """Raise from a tool to fail the call with `message` as the result the model reads.

    For failures the model can act on ("no such file", "the pattern matched twice"); the
    run goes on. Anything else a tool raises is reported as a crash with its type. Not a
    `TillerError` on purpose: `except TillerError` must never swallow it.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


#: Reads one call's arguments (the parsed JSON object the model sent, not yet validated).
ArgumentsReader = Callable[[Mapping[str, Any]], _T]


@runtime_checkable
class Tool(Protocol):
    """What the loop needs of a tool. Implement it directly (or subclass `BaseTool`) for
    tools whose schema is not a Python signature, such as proxies to MCP servers.

    What a tool may do is declared here, as typed members; the policy engine, the gate,
    the approval broker and the interlock read only these, never the tool's name (law 12):

    - `read_only`: the call changes nothing; shown in Plan phase, never needs approval.
    - `capabilities`: see `Capability`. The one source of what the interlock weighs: a
      tool *sends* data out iff it has `EXTERNAL_SEND` and *brings untrusted input* iff it
      has `UNTRUSTED_INPUT` (the bases offer `sends` and `brings_untrusted`, read from it).
    - `plan_scratchpad`: a writing tool visible in Plan, where it writes only inside the
      run's scratchpad.
    - `runs_on_client`: the client runs the call (an AG-UI frontend tool); the server
      runs nothing.
    - `sandboxed`: the call's work runs in the run's sandbox, so without the run's network
      grant it can neither fetch untrusted text nor send (the shell, its jobs).
    - `idempotent`: running the call again with the same `ExecContext.call_id` has the
      effect of running it once (the tool keys its effect on the call id, like an
      idempotency key). A call such a tool started, whose process died before it
      completed, is run again by recovery instead of blocking for a person (law 5);
      anything else that is uncertain still blocks. Declare it only when it is true: the
      runtime cannot check it, and a tool that is wrong about it repeats its effect.
    - `risk_of(arguments)`: the call's `RiskClass`, or `None` when the tool declares none
      (then read-only tools are `read_only` and any other is `external_access`: what is
      not declared may do anything, so a person is asked).
    - `paths_of(arguments)`: the workspace paths the call names, for path rules and the
      protected-path check.
    - `command_of(arguments)`: the shell command the call runs, or `None`: the engine rates
      it with the shell classifier (a declared risk can only raise that), path rules see
      what it writes, and "approve always" remembers the command, not the tool.
    - `denial_remedy`: what the model should do instead when the call is refused
      (appended to the refusal), or `None`.
    - `call(args, ctx)`: `args` is the parsed JSON object the model sent, not yet
      validated; raise `InvalidToolArguments` if it does not fit, `ToolError` for an
      expected failure.
    """

    @property
    def name(self) -> str: ...

    @property
    def description(self) -> str: ...

    @property
    def input_schema(self) -> dict[str, Any]: ...

    @property
    def read_only(self) -> bool: ...

    @property
    def capabilities(self) -> Capability: ...

    @property
    def plan_scratchpad(self) -> bool: ...

    @property
    def runs_on_client(self) -> bool: ...

    @property
    def sandboxed(self) -> bool: ...

    @property
    def idempotent(self) -> bool: ...

    @property
    def denial_remedy(self) -> str | None: ...

    def risk_of(self, arguments: Mapping[str, Any]) -> RiskClass | None: ...

    def paths_of(self, arguments: Mapping[str, Any]) -> tuple[str, ...]: ...

    def command_of(self, arguments: Mapping[str, Any]) -> str | None: ...

    async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput: ...

    def spec(self) -> ToolSpec: ...


#: Every member of `Tool`, for the check at registration (`Registry.add`).
TOOL_MEMBERS: Final = (
    "name",
    "description",
    "input_schema",
    "read_only",
    "capabilities",
    "plan_scratchpad",
    "runs_on_client",
    "sandboxed",
    "idempotent",
    "denial_remedy",
    "risk_of",
    "paths_of",
    "command_of",
    "call",
    "spec",
)


def missing_members(tool: object) -> list[str]:
    """The members of `Tool` that `tool` lacks (none for a tool)."""
    return [member for member in TOOL_MEMBERS if not hasattr(tool, member)]


def declared_risk(risk: RiskClass | str | None, tool_name: str) -> RiskClass | None:
    """`risk` as a `RiskClass` (a name like `"network"` is parsed); raises
    `ToolDefinitionError` naming the tool and the classes when it is none of them."""
    if risk is None or isinstance(risk, RiskClass):
        return risk
    try:
        return RiskClass.parse(str(risk))
    except ValueError as error:
        raise ToolDefinitionError(
            f"the tool {tool_name!r} declares an invalid risk: {error}; fix its `risk`"
        ) from None


def path_argument(arguments: Mapping[str, Any]) -> tuple[str, ...]:
    """The default `paths_of`: the call's `path` argument, when it is a string."""
    path = arguments.get("path")
    return (path,) if isinstance(path, str) else ()


class CapabilityViews:
    """`sends` and `brings_untrusted`, read from `capabilities`, the one source (so the
    two can never disagree with it); a base of `BaseTool`, `FunctionTool` and `McpTool`."""

    __slots__ = ()

    capabilities: Capability

    @property
    def sends(self) -> bool:
        """It can send data out of the machine (`Capability.EXTERNAL_SEND`)."""
        return bool(self.capabilities & Capability.EXTERNAL_SEND)

    @property
    def brings_untrusted(self) -> bool:
        """Its output may hold untrusted text (`Capability.UNTRUSTED_INPUT`)."""
        return bool(self.capabilities & Capability.UNTRUSTED_INPUT)


class BaseTool(CapabilityViews):
    """A convenient base for hand-written tools: set the class attributes, write `call`.

    ```python
    class Echo(BaseTool):
        name = "echo"
        description = "Repeat the text."
        input_schema = {"type": "object", "properties": {"text": {"type": "string"}}}
        read_only = True

        async def call(self, args, ctx):
            return ToolOutput(str(args.get("text", "")))
    ```

    Override `risk_of`, `paths_of` or `command_of` when what a call may do depends on
    its arguments; by default every call has the risk `risk`, names its `path`
    argument, and runs no shell command. A `risk` that is no `RiskClass` is refused
    when the class is defined (`ToolDefinitionError`).
    """

    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool = False
    capabilities: Capability = Capability.NONE
    denial_remedy: str | None = None
    #: Visible in the Plan phase, writing only inside the scratchpad (see `@tool`).
    plan_scratchpad: bool = False
    #: The client runs its calls (see `ClientTool`).
    runs_on_client: bool = False
    #: Its work runs in the run's sandbox (see `Tool`).
    sandboxed: bool = False
    #: Running a call again with the same `ExecContext.call_id` has the effect of running
    #: it once, so recovery re-runs it after a crash (see `Tool`).
    idempotent: bool = False
    #: The risk of every call, for the policy engine (see `@tool`).
    risk: RiskClass | str | None = None

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.risk = declared_risk(cls.risk, cls.__dict__.get("name", cls.__name__))

    def risk_of(self, arguments: Mapping[str, Any]) -> RiskClass | None:
        """Every call's risk is the class's `risk` (raises `ToolDefinitionError` if an
        instance set it to something that is no risk class)."""
        return declared_risk(self.risk, self.name)

    def paths_of(self, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        return path_argument(arguments)

    def command_of(self, arguments: Mapping[str, Any]) -> str | None:
        return None

    async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
        raise NotImplementedError

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return ToolSpec(self.name, self.description, self.input_schema)


class FunctionTool(CapabilityViews):
    """A tool made from a typed function by `@tool`. `function` is the original."""

    __slots__ = (
        "_command_of",
        "_ctx_params",
        "_fields",
        "_is_async",
        "_model",
        "_paths_of",
        "_risk_of",
        "_spec",
        "capabilities",
        "denial_remedy",
        "description",
        "function",
        "idempotent",
        "input_schema",
        "name",
        "plan_scratchpad",
        "read_only",
        "risk",
        "sandboxed",
    )

    #: A function tool runs on the server (see `ClientTool` for the other kind).
    runs_on_client: Final = False

    def __init__(  # noqa: PLR0913  # `@tool`'s options, keyword-only: they are the API
        self,
        function: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        capabilities: Capability = Capability.NONE,
        denial_remedy: str | None = None,
        plan_scratchpad: bool = False,
        risk: RiskClass | str | None = None,
        risk_of: ArgumentsReader[RiskClass | None] | None = None,
        paths_of: ArgumentsReader[tuple[str, ...]] | None = None,
        command_of: ArgumentsReader[str | None] | None = None,
        sandboxed: bool = False,
        idempotent: bool = False,
        localns: dict[str, Any] | None = None,
    ) -> None:
        self.function = function
        self.name = name if name is not None else getattr(function, "__name__", "")
        if not _NAME.match(self.name):
            raise ToolDefinitionError(
                f"{self.name!r} is not a valid tool name: providers accept 1 to 64 letters, "
                "digits, '_' and '-'; pass @tool(name=...)"
            )
        doc = parse_docstring(inspect.getdoc(function))
        self.description = description if description is not None else doc.description
        if not self.description:
            raise ToolDefinitionError(
                f"tool {self.name!r} has no description: the model needs one to know when to "
                "call it; write a docstring or pass @tool(description=...)"
            )
        self.read_only = read_only
        self.capabilities = capabilities
        self.denial_remedy = denial_remedy
        self.plan_scratchpad = plan_scratchpad
        self.risk = declared_risk(risk, self.name)
        if risk_of is not None and risk is not None:
            raise ToolDefinitionError(
                f"tool {self.name!r}: pass `risk` (every call) or `risk_of` (per call), not both"
            )
        self._risk_of = risk_of
        self._paths_of = paths_of if paths_of is not None else path_argument
        self._command_of = command_of
        self.sandboxed = sandboxed
        self.idempotent = idempotent
        self._is_async = inspect.iscoroutinefunction(function)
        self._model, self._fields, self._ctx_params = _arguments_model(
            function, self.name, doc.params, localns
        )
        self.input_schema = _clean_schema(self._model.model_json_schema())
        self._spec = ToolSpec(self.name, self.description, self.input_schema)

    def risk_of(self, arguments: Mapping[str, Any]) -> RiskClass | None:
        """The call's risk: `risk_of(arguments)` if given, else `risk`."""
        if self._risk_of is not None:
            return self._risk_of(arguments)
        return self.risk

    @property
    def takes_context(self) -> bool:
        """Whether the function is given the call's `ExecContext` (a parameter typed so):
        one that is not can reach neither the jail nor the run's services."""
        return bool(self._ctx_params)

    def paths_of(self, arguments: Mapping[str, Any]) -> tuple[str, ...]:
        """The workspace paths the call names (by default its `path` argument)."""
        return self._paths_of(arguments)

    def command_of(self, arguments: Mapping[str, Any]) -> str | None:
        """The shell command the call runs, or `None`."""
        return self._command_of(arguments) if self._command_of is not None else None

    def spec(self) -> ToolSpec:
        """The tool as the model sees it."""
        return self._spec

    def validate(self, args: dict[str, Any]) -> BaseModel:
        """`args` checked and converted by the signature; raises `InvalidToolArguments`
        with a message the model can act on."""
        try:
            return self._model.model_validate(args)
        except ValidationError as exc:
            raise InvalidToolArguments(self.name, _describe(exc)) from None

    async def call(self, args: dict[str, Any], ctx: ExecContext | PendingContext) -> ToolOutput:
        """Validate `args`, run the function (in a worker thread if it is sync) and turn
        what it returns into a `ToolOutput`. A `PendingContext` (the loop's) is built only
        if the function takes an `ExecContext`."""
        validated = self.validate(args)
        positional: list[Any] = []
        keywords: dict[str, Any] = {}
        for param, (field_name, kind) in self._fields.items():
            value = getattr(validated, field_name)
            if kind is inspect.Parameter.POSITIONAL_ONLY:
                positional.append(value)
            else:
                keywords[param] = value
        if self._ctx_params:
            context = resolve_context(ctx)
            for param in self._ctx_params:
                keywords[param] = context
        if self._is_async:
            result = await self.function(*positional, **keywords)
        else:
            # Straight to the loop's executor: no task, coroutine or shield per call.
            work = _InThread(self.function, positional, keywords)
            try:
                result = await asyncio.get_running_loop().run_in_executor(None, work)
            except asyncio.CancelledError:
                # A worker thread cannot be interrupted. Give it a moment to notice the
                # token and stop, so what it did is done before the call is reported
                # cancelled (law 8), not after; a tool that never checks is left behind.
                await work.settle(SYNC_CANCEL_GRACE)
                raise
            if inspect.isawaitable(result):
                result = await result
        return to_output(result)

    def __repr__(self) -> str:
        return f"<FunctionTool {self.name!r} read_only={self.read_only}>"


def to_output(value: Any) -> ToolOutput:
    """What a tool function returned, as a `ToolOutput`: a `str` as is, a `ToolOutput`
    unchanged, anything else encoded as JSON (pydantic models through `model_dump`), with
    the original value kept as `data`."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(value)
    encoded = orjson.dumps(value, default=_json_default, option=orjson.OPT_NON_STR_KEYS)
    return ToolOutput(encoded.decode("utf-8"), data=value)


def _json_default(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    if hasattr(value, "__fspath__"):
        return str(value)
    raise TypeError(f"a tool returned a {type(value).__name__}, which is not JSON-serializable")


#: Seconds a cancelled call waits for its sync tool's worker thread to finish.
SYNC_CANCEL_GRACE: Final = 2.0


class _InThread:
    """A sync tool function as its worker thread runs it, in a copy of the caller's
    context (as `asyncio.to_thread` does), and whether it started and ended there.

    A cancel cancels the executor's future with the call, so a cancelled call waits on
    this instead (`settle`): a function that started may finish within the grace; one
    that had not started never runs (it is abandoned under the lock, which the thread
    takes before it starts)."""

    __slots__ = ("_args", "_function", "_keywords", "_lock", "_run", "_state", "_waiter")

    def __init__(
        self, function: Callable[..., Any], args: list[Any], keywords: dict[str, Any]
    ) -> None:
        self._function = function
        self._args = args
        self._keywords = keywords
        self._run = contextvars.copy_context().run
        self._lock = threading.Lock()
        self._state = "pending"  # -> "started" -> "ended", or "abandoned"
        self._waiter: tuple[asyncio.AbstractEventLoop, asyncio.Future[None]] | None = None

    def __call__(self) -> Any:
        with self._lock:
            if self._state == "abandoned":
                return None  # the call was cancelled before the thread got to it
            self._state = "started"
        try:
            return self._run(self._function, *self._args, **self._keywords)
        except StopIteration as exc:
            # A future refuses StopIteration (`set_exception` raises TypeError in the
            # loop's callback, and the call would wait forever): as a coroutine turns it
            # into a RuntimeError (PEP 479), so does this hop. `next()` on an empty
            # iterator does it.
            detail = f": {exc}" if str(exc) else ""
            raise RuntimeError(f"the tool function raised StopIteration{detail}") from exc
        finally:
            with self._lock:
                self._state = "ended"
                waiter = self._waiter
            if waiter is not None:  # a cancelled call waits for this
                event_loop, done = waiter
                with contextlib.suppress(RuntimeError):  # its loop closed meanwhile
                    event_loop.call_soon_threadsafe(_set_done, done)

    async def settle(self, grace: float) -> None:
        """The call was cancelled: wait up to `grace` seconds for a function that started
        to end, or make sure one that had not started never does."""
        event_loop = asyncio.get_running_loop()
        done: asyncio.Future[None] = event_loop.create_future()
        with self._lock:
            if self._state == "pending":
                self._state = "abandoned"
            if self._state != "started":
                return
            self._waiter = (event_loop, done)
        await asyncio.wait({done}, timeout=grace)


def _set_done(done: asyncio.Future[None]) -> None:
    if not done.done():
        done.set_result(None)


# ── @tool ──────────────────────────────────────────────────────────────────────────


@overload
def tool(function: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    capabilities: Capability = Capability.NONE,
    denial_remedy: str | None = None,
    plan_scratchpad: bool = False,
    risk: RiskClass | str | None = None,
    risk_of: ArgumentsReader[RiskClass | None] | None = None,
    paths_of: ArgumentsReader[tuple[str, ...]] | None = None,
    command_of: ArgumentsReader[str | None] | None = None,
    sandboxed: bool = False,
    idempotent: bool = False,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(  # noqa: PLR0913  # a tool's declared capabilities, keyword-only: the API
    function: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    capabilities: Capability = Capability.NONE,
    denial_remedy: str | None = None,
    plan_scratchpad: bool = False,
    risk: RiskClass | str | None = None,
    risk_of: ArgumentsReader[RiskClass | None] | None = None,
    paths_of: ArgumentsReader[tuple[str, ...]] | None = None,
    command_of: ArgumentsReader[str | None] | None = None,
    sandboxed: bool = False,
    idempotent: bool = False,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a typed function, sync or async, into a `FunctionTool`. Bare or with options:

    ```python
    @tool
    async def now() -> str:
        \"\"\"The current time, ISO 8601.\"\"\"

    @tool(read_only=True, capabilities=Capability.PRIVATE_DATA)
    def read_notes(topic: str) -> list[str]: ...
    ```

    - name: the function's name unless given.
    - description: the docstring's first paragraph unless given.
    - schema: a pydantic model built from the signature. Every parameter needs an
      annotation (`Any` is allowed); defaults make parameters optional; `Annotated[...,
      Field(...)]` adds constraints; entries of the docstring's `Args:` (Google) or
      `Parameters` (NumPy) section become property descriptions. Unknown arguments are
      refused, so a model that misspells one is told so. A parameter annotated
      `ExecContext` (any name) receives the call's context and is not in the schema.
    - plan_scratchpad: a writing tool that stays visible in the Plan phase, where it may
      write only inside the run's scratchpad (it must check `ctx.require_writable`).
    - risk: the risk class of every call, for the policy engine (a `RiskClass` or its
      name: `"file_mutation"`, `"network"`, ...); an invalid one raises
      `ToolDefinitionError`. Without it, read-only tools are `read_only` and any other is
      `external_access` (a person is asked in every mode): the name never decides.
    - risk_of: instead of `risk`, a function of the call's arguments giving its risk
      (for tools whose risk depends on them, like `background_process`'s actions).
    - paths_of: the workspace paths a call names, for path rules and the protected-path
      check (by default its `path` argument, if it has one).
    - command_of: the shell command a call runs, rated by the shell classifier (a
      declared risk can only raise that rating).
    - sandboxed: the tool's work runs in the run's sandbox (see `Tool`).
    - idempotent: running the call again with the same `ExecContext.call_id` has the
      effect of running it once (its effect is keyed on `ctx.call_id`, like an
      idempotency key on a payment API), so a call a crash left uncertain is re-run by
      recovery instead of waiting for a person (see `Tool`). Off by default.

    Raises `ToolDefinitionError` at definition time if the function cannot be a tool.
    """
    if function is not None:
        return FunctionTool(function, localns=_caller_locals())

    def decorate(fn: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            fn,
            name=name,
            description=description,
            read_only=read_only,
            capabilities=capabilities,
            denial_remedy=denial_remedy,
            plan_scratchpad=plan_scratchpad,
            risk=risk,
            risk_of=risk_of,
            paths_of=paths_of,
            command_of=command_of,
            sandboxed=sandboxed,
            idempotent=idempotent,
            localns=_caller_locals(),
        )

    return decorate


def _caller_locals() -> dict[str, Any] | None:
    """A snapshot of the locals where the decorator was applied (two frames up), so
    annotations naming classes local to a function resolve, as in pydantic. `None` at
    module level, where the function's globals already hold everything."""
    frame = sys._getframe(2)
    try:
        if frame.f_locals is frame.f_globals:
            return None
        return dict(frame.f_locals)
    finally:
        del frame


def _is_exec_context(hint: Any) -> bool:
    if typing.get_origin(hint) is Annotated:
        hint = typing.get_args(hint)[0]
    return isinstance(hint, type) and issubclass(hint, ExecContext)


def _arguments_model(
    function: Callable[..., Any],
    tool_name: str,
    param_docs: dict[str, str],
    localns: dict[str, Any] | None,
) -> tuple[
    type[BaseModel],
    dict[str, tuple[str, inspect._ParameterKind]],
    list[str],
]:
    """Build the pydantic model of `function`'s parameters.

    Fields get private names (`p_0`, `p_1`, ...) with the parameter name as alias, so a
    parameter may be called anything (`schema`, `model_id`, `json`) without clashing
    with pydantic's own attributes; the schema and the error messages use the alias.
    Returns the model, the field of each parameter, and the `ExecContext` parameters.
    """
    try:
        signature = inspect.signature(function)
        hints = typing.get_type_hints(function, localns=localns, include_extras=True)
    except (NameError, TypeError, ValueError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: cannot read the signature's annotations: {exc}"
        ) from exc
    definitions: dict[str, Any] = {}
    fields: dict[str, tuple[str, inspect._ParameterKind]] = {}
    ctx_params: list[str] = []
    for index, (param, info) in enumerate(signature.parameters.items()):
        if info.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            raise ToolDefinitionError(
                f"tool {tool_name!r}: *{param} / **{param} cannot be described to a model; "
                "name every parameter"
            )
        if param not in hints:
            raise ToolDefinitionError(
                f"tool {tool_name!r}: parameter {param!r} has no type annotation; the model "
                "needs one to know what to send (annotate it, `Any` is allowed)"
            )
        hint = hints[param]
        if _is_exec_context(hint):
            if info.kind is inspect.Parameter.POSITIONAL_ONLY:
                raise ToolDefinitionError(
                    f"tool {tool_name!r}: the ExecContext parameter {param!r} must not be "
                    "positional-only"
                )
            ctx_params.append(param)
            continue
        annotated_description = any(
            isinstance(meta, FieldInfo) and meta.description
            for meta in getattr(hint, "__metadata__", ())
        )
        options: dict[str, Any] = {"alias": param}
        default = info.default
        if isinstance(default, FieldInfo):
            hint = Annotated[hint, default]
            annotated_description = annotated_description or bool(default.description)
        elif default is not inspect.Parameter.empty:
            options["default"] = default
        if not annotated_description and param in param_docs:
            options["description"] = param_docs[param]
        field_name = f"p_{index}"
        definitions[field_name] = (hint, Field(**options))
        fields[param] = (field_name, info.kind)
    model_name = "".join(part.title() for part in tool_name.replace("-", "_").split("_"))
    try:
        model = create_model(
            f"{model_name or 'Tool'}Arguments",
            __config__=ConfigDict(extra="forbid", protected_namespaces=()),
            **definitions,
        )
        model.model_json_schema()
    except (PydanticSchemaGenerationError, PydanticUserError, TypeError) as exc:
        raise ToolDefinitionError(
            f"tool {tool_name!r}: its parameters cannot be described as JSON Schema: {exc}"
        ) from exc
    return model, fields, ctx_params


# Keys whose value maps names to subschemas, or holds subschemas.
_SCHEMA_MAPS: Final = ("properties", "$defs", "definitions", "patternProperties")
_SCHEMA_LISTS: Final = ("anyOf", "allOf", "oneOf", "prefixItems")
_SCHEMA_ONE: Final = ("items", "additionalProperties", "not", "contains")


def _clean_schema(schema: Any) -> Any:
    """Drop pydantic's generated `title`s: the model does not need them, and every token
    of a tool's schema is paid for on every request."""
    if not isinstance(schema, dict):
        return schema
    cleaned: dict[str, Any] = {}
    for key, value in schema.items():
        if key == "title" and isinstance(value, str):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            cleaned[key] = {name: _clean_schema(sub) for name, sub in value.items()}
        elif key in _SCHEMA_LISTS and isinstance(value, list):
            cleaned[key] = [_clean_schema(sub) for sub in value]
        elif key in _SCHEMA_ONE:
            cleaned[key] = _clean_schema(value)
        else:
            cleaned[key] = value
    return cleaned


def _describe(exc: ValidationError) -> str:
    """A validation error as one line per problem, naming the argument and what was sent."""
    problems: list[str] = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "(the arguments)"
        message = error["msg"]
        if error["type"] not in ("missing", "extra_forbidden"):
            shown = repr(error.get("input"))
            if len(shown) > 80:
                shown = shown[:77] + "..."
            message = f"{message} (got {shown})"
        elif error["type"] == "extra_forbidden":
            message = "is not a parameter of this tool"
        problems.append(f"{where}: {message}")
    return "; ".join(problems)


# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

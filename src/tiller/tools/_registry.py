"""`Registry`: the tools an agent has, what a run may see of them, and running one call.

Two questions are kept apart. *May this call run?* is the loop's: it asks `lookup` (phase,
withheld, unknown) and then its gate (interlock, hooks, policy, approver), and it writes
the refusal, prefixed by who refused (law 4). *Run it* is `execute`'s: parse, validate,
call, and turn whatever happened into exactly one `ToolResult` the model can read. No
exception a tool raises escapes `execute`, except cancellation, which must propagate.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Final, Literal

import orjson

from ..conversation import ToolCall, ToolResult
from ..errors import Cancelled, InvalidToolArguments
from ..model import ToolSpec
from ..phase import Phase
from ._errors import DuplicateTool, PathOutsideJail, ToolDefinitionError
from ._exec import ExecContext, PendingContext
from ._tool import Capability, FunctionTool, Tool, ToolError, ToolOutput, missing_members

__all__ = ["Execution", "Lookup", "Outcome", "Refusal", "Registry"]

_logger: Final = logging.getLogger(__name__)

#: Why a tool may not be called: no such tool, withheld for this run, hidden in this phase.
Refusal = Literal["unknown", "withheld", "phase"]


@dataclass(frozen=True, slots=True)
class Lookup:
    """The answer to "may the model call `name` now?": the tool, or why not.

    Exactly one of `tool` and `refusal` is set. The loop picks the refusal's wording and
    prefix from `refusal` (law 4). A refused tool is not handed out at all, so it cannot
    be run by mistake.
    """

    tool: Tool | None
    refusal: Refusal | None

    @property
    def ok(self) -> bool:
        return self.tool is not None


class Outcome(enum.Enum):
    """How one executed call ended, for the loop's tool trace and counters."""

    #: The tool ran and returned a result that is not an error.
    OK = "ok"
    #: The tool reported a failure the model can act on: `ToolError`, an error
    #: `ToolOutput`, or a path outside the jail.
    ERROR = "error"
    #: The tool raised something unexpected; the result names the exception.
    CRASHED = "crashed"
    #: The arguments were not a JSON object.
    MALFORMED_JSON = "malformed_json"
    #: The arguments were JSON but did not fit the tool's parameters.
    INVALID_ARGUMENTS = "invalid_arguments"
    #: No tool of that name is registered.
    UNKNOWN_TOOL = "unknown_tool"


@dataclass(frozen=True, slots=True)
class Execution:
    """One executed call: the `result` for the transcript, how it ended, and the tool's
    structured `data` (if it returned any) for the program."""

    result: ToolResult
    outcome: Outcome
    data: Any = None

    @property
    def is_error(self) -> bool:
        return self.result.is_error

    @property
    def malformed_arguments(self) -> bool:
        """Whether the model sent arguments that could not be used (bad JSON or a schema
        mismatch): what the run result counts as malformed-argument calls."""
        return self.outcome in (Outcome.MALFORMED_JSON, Outcome.INVALID_ARGUMENTS)


class Registry:
    """The tools an agent has, by name, in registration order.

    Names are unique (`DuplicateTool` otherwise): the model addresses tools by name only.
    """

    __slots__ = ("_tools",)

    def __init__(self, tools: Iterable[Tool] = ()) -> None:
        self._tools: dict[str, Tool] = {}
        for each in tools:
            self.add(each)

    def add(self, tool: Tool) -> None:
        """Register `tool`; raises `DuplicateTool` if its name is taken, and
        `ToolDefinitionError` if it lacks a member of `Tool` or its `capabilities` are no
        `Capability`: what a tool may do is read
        from those members (law 12), so a tool must declare them all (subclass
        `BaseTool` or use `@tool` for the defaults)."""
        missing = missing_members(tool)
        if missing:
            shown = getattr(tool, "name", None) or type(tool).__name__
            raise ToolDefinitionError(
                f"{shown!r} is not a tool: it lacks {', '.join(missing)}; subclass BaseTool "
                "or use @tool, which declare the defaults"
            )
        if not isinstance(tool.capabilities, Capability):
            # The interlock, the broker and the dispatch combine it with flags: a value
            # that is none (`0`, `None`) would read as "sends nothing" or crash a call.
            raise ToolDefinitionError(
                f"{tool.name!r} declares the capabilities {tool.capabilities!r}, which are "
                "no Capability; combine its flags (Capability.NONE for none)"
            )
        if tool.name in self._tools:
            raise DuplicateTool(tool.name)
        self._tools[tool.name] = tool

    def copy(self) -> Registry:
        """A registry with the same tools, to extend without touching this one (an agent's
        registry is shared by its runs)."""
        return Registry(self._tools.values())

    def get(self, name: str) -> Tool | None:
        """The tool called `name`, whatever the phase or restrictions."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[Tool]:
        return iter(self._tools.values())

    def __len__(self) -> int:
        return len(self._tools)

    def __repr__(self) -> str:
        return f"<Registry {self.names()}>"

    # ── visibility ───────────────────────────────────────────────────────────────

    @staticmethod
    def _refusal(tool: Tool, phase: Phase, withheld: Collection[str]) -> Refusal | None:
        # Gate order (DESIGN §3): phase first, then withheld.
        # Plan hides writing tools, except those that may write to the scratchpad (they
        # refuse any other path themselves, through `ExecContext.require_writable`).
        if phase is Phase.PLAN and tool.read_only is not True and tool.plan_scratchpad is not True:
            return "phase"
        if tool.name in withheld:
            return "withheld"
        return None

    def specs_for(self, phase: Phase, *, withheld: Collection[str] = frozenset()) -> list[ToolSpec]:
        """The tools the model may see in `phase`: Plan shows only read-only tools and
        scratchpad writers, and withheld tools are never shown. In registration order, so
        requests are stable."""
        return [t.spec() for t in self._tools.values() if self._refusal(t, phase, withheld) is None]

    def visible_names(self, phase: Phase, *, withheld: Collection[str] = frozenset()) -> list[str]:
        """The names `specs_for` would show (for a refusal's "available: ..." hint)."""
        return [n for n, t in self._tools.items() if self._refusal(t, phase, withheld) is None]

    def lookup(self, name: str, phase: Phase, withheld: Collection[str] = frozenset()) -> Lookup:
        """The tool the model may call as `name` now, or why it may not.

        A model can call a tool it saw earlier or made up, so visibility is checked again
        at dispatch: unknown first, then hidden by the phase, then withheld.
        """
        found = self._tools.get(name)
        if found is None:
            return Lookup(None, "unknown")
        refusal = self._refusal(found, phase, withheld)
        if refusal is not None:
            return Lookup(None, refusal)
        return Lookup(found, None)

    def available(
        self, name: str, phase: Phase, withheld: Collection[str] = frozenset()
    ) -> Tool | None:
        """The tool the model may call as `name` now, or `None` (`lookup` says why)."""
        return self.lookup(name, phase, withheld).tool

    # ── execution ────────────────────────────────────────────────────────────────

    async def execute(
        self,
        call: ToolCall,
        ctx: ExecContext | PendingContext,
        *,
        arguments: dict[str, Any] | None = None,
    ) -> Execution:
        """Run one call and return its one result; the run goes on whatever happened.

        The arguments are parsed here (not JSON, or not an object: an error result) unless
        the caller parsed them already (`arguments`: `call.arguments` as a JSON object, as
        the loop's gate read them), then validated and run by the tool inside
        `ctx.token.scope()`, so cancelling the call's token interrupts an async tool (a
        `PendingContext` is built only for a tool that reads its context). A `ToolError`
        becomes an error result with its message; any other exception, `tool X failed:
        Type: message`. `Cancelled` and
        `asyncio.CancelledError` propagate: the call has no result, and the loop decides
        what the transcript says.

        Visibility is not checked here (`lookup` is the loop's gate), but an unknown name
        still gets an error result rather than an exception. Outputs are not capped here
        either: cap a batch's results in call order with `OutputBudget.cap_result`, so the
        transcript does not depend on which call finished first.
        """
        tool = self._tools.get(call.name)
        if tool is None:
            known = ", ".join(self._tools) or "none"
            return self._error(
                call, f"unknown tool {call.name!r}; the tools are: {known}", Outcome.UNKNOWN_TOOL
            )
        if arguments is not None:
            args: Any = arguments
        else:
            try:
                args = call.parsed_arguments()
            except orjson.JSONDecodeError as exc:
                return self._error(
                    call,
                    f"the arguments are not valid JSON: {exc}. Send the arguments of "
                    f"{call.name!r} as one JSON object.",
                    Outcome.MALFORMED_JSON,
                )
        if not isinstance(args, dict):
            return self._error(
                call,
                f"the arguments must be a JSON object, not {_json_kind(args)}. Send the "
                f"arguments of {call.name!r} as one JSON object.",
                Outcome.MALFORMED_JSON,
            )
        if isinstance(ctx, PendingContext) and type(tool).call is not FunctionTool.call:
            ctx = ctx.get()  # only `FunctionTool.call` knows to build it when it needs it
        try:
            with ctx.token.scope():
                output = await tool.call(args, ctx)  # type: ignore[arg-type]
        except Cancelled:
            raise
        except InvalidToolArguments as exc:
            return self._error(call, str(exc), Outcome.INVALID_ARGUMENTS)
        except ToolError as exc:
            return self._error(call, exc.message, Outcome.ERROR)
        except PathOutsideJail as exc:
            return self._error(call, str(exc), Outcome.ERROR)
        except Exception as exc:
            _logger.warning("tool %r raised", call.name, exc_info=exc)
            detail = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
            return self._error(call, f"tool {call.name} failed: {detail}", Outcome.CRASHED)
        if not isinstance(output, ToolOutput):
            return self._error(
                call,
                f"tool {call.name} failed: it returned a {type(output).__name__}, not a ToolOutput",
                Outcome.CRASHED,
            )
        result = ToolResult(
            call_id=call.id, name=call.name, content=output.content, is_error=output.is_error
        )
        return Execution(result, Outcome.ERROR if output.is_error else Outcome.OK, output.data)

    @staticmethod
    def _error(call: ToolCall, message: str, outcome: Outcome) -> Execution:
        result = ToolResult(call_id=call.id, name=call.name, content=message, is_error=True)
        return Execution(result, outcome)


def _json_kind(value: Any) -> str:
    if isinstance(value, list):
        return "an array"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return "null"

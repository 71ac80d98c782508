"""An agent's structured output: its `output_type`, asked for in the mode its model suits.

`Agent(output_type=Answer, output_mode="auto")` chooses the mode once, when the agent is
made, from what its model declares (`output_modes`, best first): native JSON Schema for
OpenAI-compatible servers and Claude 4.5 and later, a forced output tool for older Claude
models, the system prompt for a model that declares nothing (`ScriptedModel`,
`ReplayModel`, your own). A model that cannot take the output type's schema natively says
why (`native_schema_problem`): `auto` then takes its next mode, `native` is refused. A copy of the
agent on another model (`tiller.testing.agent_with_model`, a replay) keeps the mode, so it
asks the way the original did.

What each mode puts in the request (`ModelRequest.output`, `tools`, `tool_choice`):

- `native`: the agent's own system prompt; `output` carries the schema (its strict form
  when there is one), which the adapter sends;
- `tool`: the system prompt says to call `final_result` with the answer; the request
  offers the `final_result` tool, and `tool_choice` forces it (when it is the only tool,
  as in the tool-less final answer at a budget stop) or `required` (beside the agent's
  own tools, which the model may still call first);
- `prompted`: the system prompt carries the schema and says to reply with only JSON.

The output type is anything pydantic validates: a model, `list[Item]`, `int`, a
`RootModel`, a union. The providers want an object at the root, so in `native` and `tool`
mode a type whose root is no object is asked for inside one, `{"result": ...}`, and the
answer is read out of it (`prompted` mode asks for the value itself; a text answer that
gives the value without its wrapper is read as it is).

Whatever the mode, the answer is validated, and one that does not fit goes back to the
model with the error (`RunOptions.output_retries` times). The final answer a budget stop
pays from its reserve is validated too, but cannot be asked for again (the reserve pays
for one answer): one that does not fit leaves the run's stop cause the budget's, no
output, the text kept, and the validation error as the run's `error`. In `tool` mode an answer given
as text is still read (a model under extended thinking may not be forced to call the
tool); a call of `final_result` is the answer, never a tool call: it becomes the text of
the assistant's message (see `tiller.loop._output_call`), so the transcript and the stream
hold no call without a result (laws 1 and 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError, create_model

from ..errors import UsageError
from ..model import (
    OUTPUT_MODES,
    OUTPUT_TOOL_NAME,
    OUTPUT_WRAPPER_KEY,
    ForceTool,
    Model,
    OutputMode,
    OutputSchema,
    ToolChoice,
    ToolSpec,
    object_root_schema,
    schema_name,
    strict_json_schema,
    wrap_in_object,
)

__all__ = [
    "OUTPUT_SET_ASIDE",
    "AgentOutputMode",
    "StructuredOutput",
    "choose_output_mode",
]

#: What `Agent(output_mode=...)` accepts: a mode, or `auto` (the model's best).
AgentOutputMode = Literal["auto", "native", "tool", "prompted"]

#: Folded into the next user message when the model called `final_result` beside other
#: tools: the answer is set aside (it was written before the results were in).
OUTPUT_SET_ASIDE = (
    f"Your {OUTPUT_TOOL_NAME} call was set aside because you called other tools in the "
    f"same reply. Read their results, then call {OUTPUT_TOOL_NAME} on its own."
)


def choose_output_mode(requested: str, model: Model, output_type: Any = None) -> OutputMode:
    """The mode `requested` (`auto`: the first `model` declares; `prompted` if it declares
    none). `UsageError` for an unknown mode or one the model says it does not support.
    With an `output_type`, a model that says it cannot take that schema natively
    (`native_schema_problem`) is not asked natively: `auto` takes its next mode, and an
    explicit `native` is refused, saying why."""
    declared = _declared_modes(model)
    if requested == "auto":
        usable = (
            m for m in declared if m != "native" or _native_problem(model, output_type) is None
        )
        return next(usable, "prompted")
    if requested not in OUTPUT_MODES:
        raise UsageError(
            f"output_mode={requested!r} is not a mode; use 'auto', 'native', 'tool' or 'prompted'"
        )
    mode: OutputMode = requested
    if declared and mode not in declared:
        raise UsageError(
            f"{model!r} does not support output_mode={mode!r} (it supports "
            f"{', '.join(declared)}); pick one of those, or 'auto'"
        )
    problem = _native_problem(model, output_type) if mode == "native" else None
    if problem is not None:
        raise UsageError(
            f"{model!r} cannot take the schema of {_type_name(output_type)} natively: "
            f"{problem}; use output_mode='tool' (or 'auto', which falls back to it)"
        )
    return mode


def _native_problem(model: Model, output_type: Any) -> str | None:
    """Why `model` cannot take `output_type`'s schema natively, if it says so."""
    check = getattr(model, "native_schema_problem", None)
    if output_type is None or not callable(check):
        return None
    problem = check(StructuredOutput(output_type, "native").spec.schema)
    return problem if isinstance(problem, str) else None


def _declared_modes(model: Model) -> tuple[OutputMode, ...]:
    declared = getattr(model, "output_modes", None)
    if not isinstance(declared, tuple | list):
        return ()
    return tuple(mode for mode in declared if mode in OUTPUT_MODES)


class StructuredOutput:
    """`output_type` in `mode`: what goes in the request, and how answers are validated."""

    __slots__ = (
        "_adapter",
        "_instruction",
        "_wrapper",
        "mode",
        "output_type",
        "schema",
        "spec",
        "tool",
        "type_name",
    )

    def __init__(self, output_type: Any, mode: OutputMode) -> None:
        self.output_type = output_type
        self.mode = mode
        self._adapter: TypeAdapter[Any] = TypeAdapter(output_type)
        #: The output type's name, for messages (`list[int]` for a generic alias).
        self.type_name = _type_name(output_type)
        #: The output type's JSON Schema, as pydantic gives it (made once per agent).
        self.schema = self._adapter.json_schema()
        # What the model is shown: its root an object, which providers require; a type
        # whose root is none is asked for inside one (`{"result": ...}`), except when
        # prompted, where the answer is the value itself.
        schema = object_root_schema(self.schema)
        self._wrapper: type[BaseModel] | None = None
        if schema.get("type") != "object" and mode != "prompted":
            schema = wrap_in_object(schema)
            field: dict[str, Any] = {OUTPUT_WRAPPER_KEY: (output_type, ...)}
            self._wrapper = create_model("Wrapped", __config__=ConfigDict(extra="forbid"), **field)
        strict = strict_json_schema(schema)
        description = schema.get("description")
        self.spec = OutputSchema(
            mode=mode,
            name=schema_name(str(schema.get("title") or self.type_name)),
            schema=strict if strict is not None else schema,
            strict=strict is not None,
            description=description if isinstance(description, str) else None,
        )
        self.tool = ToolSpec(
            name=OUTPUT_TOOL_NAME,
            description=(
                "Give your final answer: call this once you have it, with the answer as "
                "the arguments." + (f" The answer: {description}" if description else "")
            ),
            parameters=schema,
        )
        #: What this mode adds to the system prompt, made once: in prompted mode it holds
        #: the schema, which costs more to dump than a whole step to run.
        self._instruction = self._make_instruction()

    @property
    def wrapped(self) -> bool:
        """The answer is asked for inside an object, `{"result": ...}`."""
        return self._wrapper is not None

    def _make_instruction(self) -> str | None:
        if self.mode == "native":
            return None
        if self.mode == "tool":
            return (
                f"When you give your final answer, call the {OUTPUT_TOOL_NAME} tool with it "
                "as the arguments, on its own, instead of answering in text."
            )
        schema = orjson.dumps(self.schema).decode()
        return (
            "When you give your final answer, reply with only JSON that validates "
            f"against this JSON Schema, with no other text:\n{schema}"
        )

    def system_prompt(self, own: str | None) -> str | None:
        """The agent's system prompt with what this mode adds to it."""
        instruction = self._instruction
        if instruction is None:
            return own
        return f"{own}\n\n{instruction}" if own else instruction

    def request_parts(
        self, tools: Sequence[ToolSpec], *, final_answer: bool
    ) -> tuple[list[ToolSpec], ToolChoice | None, OutputSchema | None]:
        """The request's tools, tool choice and output for one call offering `tools`.
        The tool-less final answer (the budget is spent) offers none of the agent's
        tools; in tool mode it offers the output tool alone, forced: a call of it is the
        answer, not a call to run."""
        if self.mode == "tool":
            if final_answer:
                return [self.tool], ForceTool(OUTPUT_TOOL_NAME), self.spec
            choice: ToolChoice = ForceTool(OUTPUT_TOOL_NAME) if not tools else "required"
            return [*tools, self.tool], choice, self.spec
        return list(tools), None, self.spec

    def validate(self, text: str, arguments: str | None) -> Any:
        """The answer: the output tool's `arguments` when it was called, else the text
        (as JSON, a code fence tolerated), read out of its wrapper when it has one.
        Raises `ValidationError`."""
        if arguments is not None:
            body = arguments
        else:
            body = text.strip()
            if body.startswith("```"):
                body = body.split("\n", 1)[1] if "\n" in body else ""
                body = body.rsplit("```", 1)[0]
        if self._wrapper is None:
            return self._adapter.validate_json(body)
        try:
            return getattr(self._wrapper.model_validate_json(body), OUTPUT_WRAPPER_KEY)
        except ValidationError as asked_for:
            # An answer in text may be the value itself (`[1, 2]` for `{"result": [1,
            # 2]}`): it says the same, so it is read. One that is the wrapper, with a
            # value that does not fit, is not read again as the bare type; the error
            # the model is shown is the wrapper's, what it was asked for.
            if arguments is not None or _is_wrapper(body):
                raise
            bare_error: ValidationError | None = None
            try:
                return self._adapter.validate_json(body)
            except ValidationError as bare:
                bare_error = bare
            raise asked_for from bare_error

    def final_nudge(self, nudge: str) -> str:
        """The budget stop's `nudge` ("do not call any tools"), in tool mode saying to call
        the output tool, which that answer offers alone (its call is no tool call)."""
        if self.mode != "tool":
            return nudge
        return nudge.replace(
            "Do not call any tools.", f"Call no tool but {OUTPUT_TOOL_NAME}, with your answer."
        )

    def read_final(self, text: str, arguments: str | None) -> tuple[Any, str | None]:
        """The budget stop's answer as `(output, None)`, or `(None, why)` when it does not
        validate: the reserve paid for that one call, so it is not asked for again, and
        the run says why it has no output (law 7)."""
        try:
            return self.validate(text, arguments), None
        except ValidationError as exc:
            return None, (
                f"the final answer at the budget stop did not validate as {self.type_name}, "
                f"and the budget leaves no retry: {exc}"
            )

    def retry_text(self, exc: ValidationError, *, from_tool: bool) -> str:
        """What the model is told when its answer did not validate."""
        if from_tool:
            return (
                f"Your {OUTPUT_TOOL_NAME} call did not validate against the required "
                f"schema:\n{exc}\nCall {OUTPUT_TOOL_NAME} again with arguments that validate."
            )
        again = (
            f"Give your final answer by calling the {OUTPUT_TOOL_NAME} tool."
            if self.mode == "tool"
            else "Reply again with only the JSON."
        )
        return f"Your answer did not validate against the required schema:\n{exc}\n{again}"

    def dump(self, output: Any) -> Any:
        """`output` as JSON-ready data (for `RUN_FINISHED.result`)."""
        return self._adapter.dump_python(output, mode="json")


def _is_wrapper(body: str) -> bool:
    """`body` is JSON for an object with the wrapper's key (`{"result": ...}`)."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError:
        return False
    return isinstance(data, dict) and OUTPUT_WRAPPER_KEY in data


def _type_name(output_type: Any) -> str:
    """`output_type` as a person would write it: `Answer`, `list[int]`, `int | None`."""
    if isinstance(output_type, type) and not getattr(output_type, "__args__", None):
        return output_type.__name__
    return repr(output_type).replace("typing.", "")

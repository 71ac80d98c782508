"""`@tool`: schemas from signatures, docstrings, ExecContext injection, threads, returns."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field

from tiller import InvalidToolArguments
from tiller.model import ToolSpec
from tiller.tools import (
    BaseTool,
    Capability,
    ExecContext,
    FunctionTool,
    Tool,
    ToolDefinitionError,
    ToolOutput,
    tool,
)


@pytest.fixture
def ctx(tmp_path: Path) -> ExecContext:
    return ExecContext.for_test(tmp_path)


# ── schema ───────────────────────────────────────────────────────────────────────


def test_bare_decorator_builds_name_description_and_schema() -> None:
    @tool
    def greet(name: str, times: int = 1, loud: bool | None = None) -> str:
        """Greet someone by name.

        More detail for developers, not for the model.

        Args:
            name: Who to greet.
            times: How many times,
                at least once.
        """
        return name * times

    assert isinstance(greet, FunctionTool)
    assert greet.name == "greet"
    assert greet.description == "Greet someone by name."
    assert greet.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "name": {"type": "string", "description": "Who to greet."},
            "times": {
                "type": "integer",
                "default": 1,
                "description": "How many times, at least once.",
            },
            "loud": {"anyOf": [{"type": "boolean"}, {"type": "null"}], "default": None},
        },
        "required": ["name"],
    }
    assert greet.read_only is False
    assert greet.capabilities is Capability.NONE
    assert greet.denial_remedy is None
    assert greet.spec() == ToolSpec("greet", "Greet someone by name.", greet.input_schema)


def test_options_override_name_description_and_flags() -> None:
    @tool(
        name="fetch-page",
        description="Fetch a web page.",
        read_only=True,
        capabilities=Capability.UNTRUSTED_INPUT | Capability.EXTERNAL_SEND,
        denial_remedy="Ask the user for the page's text.",
    )
    async def fetch(url: str) -> str:
        """Ignored because a description was given."""
        return url

    assert fetch.name == "fetch-page"
    assert fetch.description == "Fetch a web page."
    assert fetch.read_only is True
    assert Capability.EXTERNAL_SEND in fetch.capabilities
    assert fetch.denial_remedy == "Ask the user for the page's text."
    assert isinstance(fetch, Tool)


def test_exec_context_parameter_is_injected_not_described() -> None:
    @tool
    def where(path: str, context: ExecContext, *, verbose: bool = False) -> str:
        """Say where a path is."""
        return str(context.jail.resolve(path))

    assert list(where.input_schema["properties"]) == ["path", "verbose"]
    assert where.input_schema["required"] == ["path"]


def test_numpy_docstring_and_field_descriptions() -> None:
    @tool
    def area(
        width: float,
        height: Annotated[float, Field(gt=0, description="From Field, wins.")],
        unit: str = Field("m", description="Also from Field."),
    ) -> float:
        """Compute an area.

        Parameters
        ----------
        width : float
            The width,
            in units.
        height : float
            Not used: Field's description wins.

        Returns
        -------
        float
        """
        return width * height

    props = area.input_schema["properties"]
    assert props["width"]["description"] == "The width, in units."
    assert props["height"] == {
        "type": "number",
        "exclusiveMinimum": 0,
        "description": "From Field, wins.",
    }
    assert props["unit"] == {"type": "string", "default": "m", "description": "Also from Field."}
    assert area.input_schema["required"] == ["width", "height"]


class Point(BaseModel):
    """A point on the plane."""

    x: int
    y: int = 0


def test_nested_models_and_awkward_names_become_schema() -> None:
    @tool
    def plot(points: list[Point], schema: str = "svg", model_id: str = "m") -> str:
        """Plot points."""
        return schema

    schema = plot.input_schema
    assert schema["properties"]["points"] == {"items": {"$ref": "#/$defs/Point"}, "type": "array"}
    assert schema["$defs"]["Point"]["properties"] == {
        "x": {"type": "integer"},
        "y": {"type": "integer", "default": 0},
    }
    assert "title" not in schema and "title" not in schema["$defs"]["Point"]
    assert schema["$defs"]["Point"]["description"] == "A point on the plane."
    assert set(schema["properties"]) == {"points", "schema", "model_id"}


def test_local_classes_resolve_in_string_annotations() -> None:
    class Color(BaseModel):
        name: str

    @tool
    def paint(color: Color) -> str:
        """Paint with a color."""
        return color.name

    assert paint.input_schema["properties"]["color"] == {"$ref": "#/$defs/Color"}


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("def f(*args: int) -> str:\n    'Doc.'\n    return ''", "name every parameter"),
        ("def f(x) -> str:\n    'Doc.'\n    return ''", "no type annotation"),
        ("def f(x: int) -> str:\n    return ''", "no description"),
        ("def f(x: Unknown) -> str:\n    'Doc.'\n    return ''", "cannot read"),
        ("def f(x: Opaque) -> str:\n    'Doc.'\n    return ''", "JSON Schema"),
    ],
)
def test_functions_that_cannot_be_tools_are_refused_at_definition(
    source: str, message: str
) -> None:
    class Opaque:
        pass

    namespace: dict[str, Any] = {"Opaque": Opaque}
    exec(source, namespace)
    with pytest.raises(ToolDefinitionError, match=message):
        tool(namespace["f"])


def test_invalid_names_are_refused() -> None:
    def f() -> str:
        """Doc."""
        return ""

    with pytest.raises(ToolDefinitionError, match="not a valid tool name"):
        tool(name="has space")(f)


# ── calling ──────────────────────────────────────────────────────────────────────


async def test_sync_tools_run_in_a_worker_thread(ctx: ExecContext) -> None:
    @tool
    def which_thread() -> int:
        """Report the thread."""
        return threading.get_ident()

    output = await which_thread.call({}, ctx)
    assert output.content != str(threading.get_ident())
    assert output.data != threading.get_ident()


async def test_async_tools_are_awaited_on_the_loop(ctx: ExecContext) -> None:
    @tool
    async def which_thread(delay: float = 0) -> int:
        """Report the thread."""
        await asyncio.sleep(delay)
        return threading.get_ident()

    output = await which_thread.call({}, ctx)
    assert output.data == threading.get_ident()


async def test_arguments_are_validated_and_converted(ctx: ExecContext) -> None:
    seen: list[Any] = []

    @tool
    def record(count: int, point: Point, ctx: ExecContext, tag: str = "t") -> str:
        """Record values."""
        seen.append((count, point, tag, ctx.call_id))
        return "ok"

    assert (await record.call({"count": "3", "point": {"x": 1}}, ctx)).content == "ok"
    assert seen == [(3, Point(x=1, y=0), "t", "call-test")]


async def test_invalid_arguments_say_what_is_wrong(ctx: ExecContext) -> None:
    @tool
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    with pytest.raises(InvalidToolArguments) as caught:
        await add.call({"a": "one", "c": 2}, ctx)
    assert str(caught.value) == (
        "invalid arguments for tool 'add': a: Input should be a valid integer, unable to "
        "parse string as an integer (got 'one'); b: Field required; "
        "c: is not a parameter of this tool"
    )


async def test_positional_only_parameters_are_passed_positionally(ctx: ExecContext) -> None:
    @tool
    def sub(a: int, b: int, /) -> int:
        """Subtract."""
        return a - b

    assert (await sub.call({"a": 5, "b": 2}, ctx)).content == "3"


async def test_return_values_become_outputs(ctx: ExecContext) -> None:
    @tool
    def text() -> str:
        """Text."""
        return "plain"

    @tool
    def model() -> Point:
        """A model."""
        return Point(x=1, y=2)

    @tool
    def mapping() -> dict[str, Any]:
        """A mapping."""
        return {"path": Path("a/b"), "tags": ("x",), "n": None}

    @tool
    def nothing() -> None:
        """Nothing."""

    @tool
    def explicit() -> ToolOutput:
        """An explicit output."""
        return ToolOutput("bad", is_error=True, data={"k": 1})

    assert await text.call({}, ctx) == ToolOutput("plain")
    assert await model.call({}, ctx) == ToolOutput('{"x":1,"y":2}', data=Point(x=1, y=2))
    out = await mapping.call({}, ctx)
    assert out.content == '{"path":"a/b","tags":["x"],"n":null}'
    assert (await nothing.call({}, ctx)).content == "null"
    assert await explicit.call({}, ctx) == ToolOutput("bad", is_error=True, data={"k": 1})


async def test_base_tool_for_hand_written_tools(ctx: ExecContext) -> None:
    class Echo(BaseTool):
        name = "echo"
        description = "Repeat the text."
        input_schema = {"type": "object", "properties": {"text": {"type": "string"}}}  # noqa: RUF012
        read_only = True

        async def call(self, args: dict[str, Any], ctx: ExecContext) -> ToolOutput:
            return ToolOutput(str(args.get("text", "")))

    echo = Echo()
    assert isinstance(echo, Tool)
    assert echo.spec() == ToolSpec("echo", "Repeat the text.", Echo.input_schema)
    assert (await echo.call({"text": "hi"}, ctx)).content == "hi"

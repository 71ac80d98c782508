"""A reply's call of the output tool (`tool` mode): the answer, never a tool call.

The model turn (`tiller.loop._model_turn`) asks `output_tool_of(request)` whether the
request offered the output tool; if so, it never announces a call of it, and once the
reply is complete asks `read_output_call(response)` what the call was: alone, its
arguments are the answer (the turn streams them as the message's text, after a separator
when the model wrote text first), as they are beside calls cut off mid-stream (which never
run); beside other calls, it is set aside (they run, and the
model is told to call it on its own). `without_output_calls` then gives the response as
the transcript keeps it, so no call is left without a result (laws 1 and 2).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ..model import OUTPUT_TOOL_NAME, AccumulatedResponse, ModelRequest

__all__ = ["OutputCall", "output_tool_of", "read_output_call", "without_output_calls"]


@dataclass(slots=True, frozen=True)
class OutputCall:
    """What a complete reply did with the output tool."""

    #: The arguments, when the reply called it alone (they may not be JSON: the answer
    #: then fails validation with a message the model can act on).
    arguments: str | None = None
    #: `arguments` as streamed into the message's text (after a separator, if needed).
    shown: str = ""
    #: It was called beside other tools.
    set_aside: bool = False


def output_tool_of(request: ModelRequest) -> str | None:
    """The output tool's name when `request` offers it (tool mode), else None."""
    output = request.output
    if output is None or output.mode != "tool":
        return None
    return OUTPUT_TOOL_NAME if any(t.name == OUTPUT_TOOL_NAME for t in request.tools) else None


def read_output_call(response: AccumulatedResponse) -> OutputCall | None:
    """The reply's output call (the first one counts), or None if it made none."""
    calls = [c for c in response.message.tool_calls if c.name == OUTPUT_TOOL_NAME]
    broken = [d for d in response.dropped if d.name == OUTPUT_TOOL_NAME]
    if not calls and not broken:
        return None
    # Another call the model will hear back about (one that runs, or a complete one whose
    # arguments are not JSON, answered with its error) must be read before answering; one
    # cut off mid-stream (`incomplete`, e.g. at the length limit) never runs and gets no
    # result, so it is no reason to throw a valid answer away.
    if any(c.name != OUTPUT_TOOL_NAME for c in response.message.tool_calls) or any(
        d.name != OUTPUT_TOOL_NAME and d.reason != "incomplete" for d in response.dropped
    ):
        return OutputCall(set_aside=True)
    arguments = calls[0].arguments if calls else broken[0].arguments
    written = response.message.text
    shown = f"\n\n{arguments}" if written and not written[-1].isspace() else arguments
    return OutputCall(arguments=arguments, shown=shown)


def without_output_calls(
    response: AccumulatedResponse, output: OutputCall | None
) -> AccumulatedResponse:
    """`response` as the transcript keeps it: no output calls (dropped ones included, so
    none is kept as a malformed call); their arguments, when they were the answer, are
    the message's text, as streamed."""
    if output is None:
        return response
    message = response.message
    kept = tuple(c for c in message.tool_calls if c.name != OUTPUT_TOOL_NAME)
    update: dict[str, object] = {"tool_calls": kept}
    if output.arguments is not None:
        update["text"] = message.text + output.shown
    return replace(
        response,
        message=message.model_copy(update=update),
        dropped=tuple(d for d in response.dropped if d.name != OUTPUT_TOOL_NAME),
    )

"""`request_shape`: the agent's side of a model request, as a capture records it.

A request carries the conversation and, besides it, what the agent is: its system prompt,
the tools the model is shown and the schema its final answer must fit. A capture records
that shape with each call and a replay compares it (`tiller.model.replay`), so a changed
agent diverges instead of replaying a run it would no longer make.

The shape also names the output mode the request asked in (`output_mode`), so a replay
can declare it: an agent a factory builds on the replay model then chooses the recorded
mode, not `prompted`, and asks as the recorded run did.
"""

from __future__ import annotations

from typing import Any

from ._base import ModelRequest

__all__ = ["request_shape"]


def request_shape(request: ModelRequest) -> dict[str, Any]:
    """The agent's side of a request, as JSON: what it carries besides the conversation —
    the system prompt, the tools the model is shown (name, description, parameters) and
    the output schema and the output mode (None: no structured answer asked for in this
    request). A capture records it per call; a replay compares it."""
    return {
        "system": request.system,
        "tools": [
            {"name": spec.name, "description": spec.description, "parameters": spec.parameters}
            for spec in request.tools
        ],
        "output_schema": request.output_schema,
        "output_mode": request.output.mode if request.output is not None else None,
    }

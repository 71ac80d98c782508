"""The agent both processes of the resume test build: one write, paused for review."""

from __future__ import annotations

from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.tools import tool


@tool(risk="file_mutation")
def write_note(text: str) -> str:
    """Write a note."""
    return "written"


agent = Agent(
    ScriptedModel([{"tool_calls": [{"name": "write_note", "arguments": {"text": "hi"}}]}, "noted"]),
    [write_note],
    name="writer",
)

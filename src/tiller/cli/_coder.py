"""The built-in coding agent, as a factory another process can load.

`tiller run` builds its agent here and records the reference (`tiller.cli._coder:
coding_agent`) and the model string in the run's checkpoint, so `tiller approve`, `tiller
runs resume` or `tiller outbox send` in a later process rebuild the same agent on the same
model (`load_agent(ref, model=...)`), with the same tools.
"""

from __future__ import annotations

from typing import Final

from ..errors import UsageError
from ..loop import Agent
from ..tools import Tool
from ..tools.builtin import coding_tools

__all__ = ["CODER_REF", "CODER_WEB_REF", "CODING_PROMPT", "coding_agent", "coding_agent_web"]

CODING_PROMPT: Final = (
    "You are tiller's coding agent. You work inside one project directory through your "
    "tools: read files before editing them, make small exact edits, run the project's "
    "tests or commands to check your work, and say plainly what you changed and what you "
    "could not do."
)

CODER_REF: Final = "tiller.cli._coder:coding_agent"
CODER_WEB_REF: Final = "tiller.cli._coder:coding_agent_web"


def _agent(model: str, tools: list[Tool], ref: str) -> Agent:
    return Agent(model, tools, system_prompt=CODING_PROMPT, name="coder", ref=ref)


def coding_agent(model: str | None = None) -> Agent:
    """The coding agent on `model` (a model string such as `ollama:qwen2.5-coder`)."""
    if model is None:
        raise UsageError("the coding agent needs a model string (the run records it)")
    return _agent(model, coding_tools(), CODER_REF)


def coding_agent_web(model: str | None = None) -> Agent:
    """The coding agent with `web_fetch` too (`tiller run --web`)."""
    if model is None:
        raise UsageError("the coding agent needs a model string (the run records it)")
    return _agent(model, coding_tools(web=True), CODER_WEB_REF)

"""For the eval runner tests: scripted agents and a scorer or two."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from tiller.conversation import AssistantMessage, UserMessage
from tiller.evals import CaseOutcome, Score
from tiller.loop import Agent
from tiller.model import ScriptedModel
from tiller.model.scripted import TurnInfo, TurnLike
from tiller.tools.builtin import write_file

Messages = Sequence[UserMessage | AssistantMessage]


class Includes:
    """Passes when the run's text includes the case's expected value."""

    def __init__(self, name: str = "includes") -> None:
        self.name = name

    async def score(self, outcome: CaseOutcome) -> Score:
        expected = str(outcome.case.expected)
        return Score.of(expected in outcome.text, f"looked for {expected!r}")


class Recording:
    """Passes everything, and keeps every outcome it saw (and the files of its
    workspace at the time, by relative path; not the runtime's own `.tiller/`)."""

    def __init__(self, name: str = "recording") -> None:
        self.name = name
        self.seen: list[CaseOutcome] = []
        self.files: dict[str, dict[str, str]] = {}

    async def score(self, outcome: CaseOutcome) -> Score:
        self.seen.append(outcome)
        if outcome.workspace is not None:
            self.files[f"{outcome.case.id}-e{outcome.epoch}"] = {
                str(path.relative_to(outcome.workspace)): (
                    f"-> {path.readlink()}" if path.is_symlink() else path.read_text()
                )
                for path in sorted(outcome.workspace.rglob("*"))
                if (path.is_symlink() or path.is_file())
                and path.relative_to(outcome.workspace).parts[0] != ".tiller"
            }
        return Score.of(True)


def answering(reply: Callable[[str], str]) -> Callable[[], Agent]:
    """An agent factory whose model answers each prompt with `reply(prompt)` in one step."""

    def turn(messages: Messages, info: TurnInfo) -> TurnLike:
        return reply(messages[0].text)

    return lambda: Agent(ScriptedModel(turn))


def writing(path: str = "out.txt", content: str = "written") -> Callable[[], Agent]:
    """An agent factory that writes one file (`write_file`, which needs approval), then
    answers with the prompt."""

    def turn(messages: Messages, info: TurnInfo) -> Any:
        if info.turn == 1:
            call = {"name": "write_file", "arguments": {"path": path, "content": content}}
            return {"tool_calls": [call]}
        return f"done: {messages[0].text}"

    return lambda: Agent(ScriptedModel(turn), [write_file])

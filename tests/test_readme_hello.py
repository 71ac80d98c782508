"""The README's hello world runs as written, offline: a `ScriptedModel` stands in for the
model string, calls `add`, and answers with what `add` returned.

The block is fenced ```` ```python hello ```` so that `test_readme.py`, which runs every
plain ```` ```python ```` block as it stands, leaves it alone: as written it talks to a
local Ollama.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from tiller import ScriptedModel
from tiller.model import TurnInfo

ROOT = Path(__file__).resolve().parents[1]
MODEL_STRING = '"ollama:qwen2.5-coder"'


def hello_block() -> str:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python hello\n(.*?)\n```", text, re.S)
    assert len(blocks) == 1, "the README shows one hello world"
    return blocks[0]


def test_the_hello_world_uses_three_names_from_tiller() -> None:
    block = hello_block()
    assert block.startswith("from tiller import Agent, tool\n")
    assert [line for line in block.splitlines() if "import" in line] == [
        "from tiller import Agent, tool"
    ]
    assert f"Agent({MODEL_STRING}, [add]).run_sync(" in block
    assert "@tool(read_only=True)" in block


def answer_with_the_sum(messages: list[Any], info: TurnInfo) -> Any:
    """Call `add` first; once its result is in, answer with it."""
    results = [r for m in messages for r in getattr(m, "tool_results", ())]
    if not results:
        return {"tool_calls": [{"name": "add", "arguments": {"a": 2, "b": 3}}]}
    return f"2 + 3 = {results[-1].content}"


def test_the_hello_world_runs_offline(capsys: pytest.CaptureFixture[str]) -> None:
    block = hello_block()
    assert block.count(MODEL_STRING) == 1
    offline = block.replace(MODEL_STRING, "model")
    model = ScriptedModel(answer_with_the_sum)
    exec(compile(offline, "README.md", "exec"), {"__name__": "readme", "model": model})
    assert capsys.readouterr().out == "2 + 3 = 5\n"
    assert len(model.requests) == 2, "the model called add, then answered"


def test_a_model_string_and_a_plain_list_of_tools_make_an_agent() -> None:
    """The hello world as written builds its agent offline: the string names the model,
    which is only contacted when the run starts."""
    from tiller import Agent, tool

    @tool(read_only=True)
    def add(a: int, b: int) -> int:
        """Add two numbers."""
        return a + b

    agent = Agent("ollama:qwen2.5-coder", [add])
    assert (agent.model.provider, agent.model.name) == ("ollama", "qwen2.5-coder")
    assert agent.model_spec == "ollama:qwen2.5-coder"
    assert agent.registry.get("add") is add

"""A factory that takes `model=` rebuilds a run's agent on the model the run used."""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from tiller.loop import Agent, load_agent
from tiller.model import ScriptedModel
from tiller.state import RunState


@pytest.fixture
def factories(monkeypatch: pytest.MonkeyPatch) -> str:
    module = types.ModuleType("model_factories")

    def coder(model: str | None = None) -> Agent:
        agent = Agent(ScriptedModel(["hi"]), [])
        agent.config["asked_for"] = model
        return agent

    def plain() -> Agent:
        return Agent(ScriptedModel(["hi"]), [])

    module.coder = coder  # type: ignore[attr-defined]
    module.plain = plain  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "model_factories", module)
    return "model_factories"


def test_the_model_string_reaches_a_factory_that_takes_it(factories: str) -> None:
    agent = load_agent(f"{factories}:coder", model="ollama:qwen2.5-coder")
    assert agent.config["asked_for"] == "ollama:qwen2.5-coder"
    assert load_agent(f"{factories}:coder").config["asked_for"] is None
    assert load_agent(f"{factories}:plain", model="ollama:x").ref == f"{factories}:plain"


async def test_a_run_records_the_model_string_its_agent_was_built_from(tmp_path: Path) -> None:
    script = tmp_path / "script.yaml"
    script.write_text("turns:\n  - hello\n")
    agent = Agent(f"scripted:{script}", [])
    assert agent.model_spec == f"scripted:{script}"
    result = await agent.run("hi")
    assert result.state.model_spec == f"scripted:{script}"
    assert Agent(ScriptedModel(["x"]), []).model_spec is None


def test_the_state_round_trips_the_model_spec() -> None:
    state = RunState(run_id="r", thread_id="t", model_spec="openai:gpt-4.1")
    assert RunState.from_json(state.to_json()).model_spec == "openai:gpt-4.1"


def test_a_factory_given_a_model_string_records_it_for_resumes(tmp_path: Path) -> None:
    """A factory that builds its own Model object from `model`: the agent still records
    the string, so the run's checkpoint has it and a resume (approve, deny) calls the
    factory with it again, not with None (found by review: the resumed run failed)."""
    (tmp_path / "own_model_agent.py").write_text(
        "from tiller.loop import Agent\n"
        "from tiller.model import ScriptedModel\n\n\n"
        "def make(model=None):\n"
        "    assert model is not None, 'called without its model'\n"
        "    return Agent(ScriptedModel(['hi'], name=model))\n"
    )
    sys.path.insert(0, str(tmp_path))
    try:
        agent = load_agent("own_model_agent:make", model="scripted-special")
    finally:
        sys.path.remove(str(tmp_path))
        sys.modules.pop("own_model_agent", None)
    assert agent.model_spec == "scripted-special"

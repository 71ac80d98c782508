"""A served agent with an `output_type`: the validated answer reaches the AG-UI client in
`RUN_FINISHED.result`, beside the stop cause (it carried the stop cause only)."""

from __future__ import annotations

from collections.abc import Callable

from ag_ui.core import RunFinishedEvent
from pydantic import BaseModel

from tiller.loop import Agent
from tiller.model import ScriptedModel

from .conftest import post_run, run_input

ASK = [{"id": "u1", "role": "user", "content": "Weather in Oslo?"}]


class Weather(BaseModel):
    city: str
    celsius: int


def test_the_validated_output_is_in_run_finished_result(serve: Callable[..., str]) -> None:
    # Asked by the output tool (as an older Claude is), the first answer invalid.
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "final_result", "arguments": {"city": "Oslo"}}]},
            {
                "tool_calls": [
                    {"name": "final_result", "arguments": {"city": "Oslo", "celsius": 20}}
                ]
            },
        ]
    )
    url = serve(Agent(model, output_type=Weather, output_mode="tool"))
    events = post_run(url, run_input("t1", "r1", ASK))
    finished = events[-1]
    assert finished["type"] == "RUN_FINISHED"
    assert finished["result"] == {
        "stopCause": "completed",
        "output": {"city": "Oslo", "celsius": 20},
    }
    assert RunFinishedEvent.model_validate(finished).result == finished["result"]
    assert not [e for e in events if e["type"].startswith("TOOL_CALL")]

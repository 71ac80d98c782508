"""`PauseOnRisk`: a review policy that pauses on a minimum risk class, and survives a
resume in another process (it is rebuilt from the checkpoint)."""

from __future__ import annotations

from tiller.conversation import AssistantMessage, ToolCall
from tiller.loop import Agent, PauseOnRisk, RunContext, RunOptions, record_policy
from tiller.loop._agent_ref import options_from
from tiller.model import ScriptedModel
from tiller.policy import RiskClass
from tiller.state import StopCause
from tiller.tools import Registry
from tiller.tools.builtin import execute_command, read_file, write_file

REGISTRY = Registry([read_file, write_file, execute_command])


def step(*calls: tuple[str, str]) -> AssistantMessage:
    return AssistantMessage(
        tool_calls=tuple(
            ToolCall(id=f"c{n}", name=name, arguments=args) for n, (name, args) in enumerate(calls)
        )
    )


def test_it_pauses_at_or_above_the_minimum() -> None:
    review = PauseOnRisk("shell_mutation")
    assert review.should_pause(1, step(("read_file", '{"path": "a"}')), REGISTRY) is None
    write = ("write_file", '{"path": "a", "content": ""}')
    assert review.should_pause(1, step(write), REGISTRY) is None
    reason = review.should_pause(1, step(("execute_command", '{"command": "make"}')), REGISTRY)
    assert reason is not None and "execute_command (shell_mutation)" in reason
    assert review.should_pause(1, step(("execute_command", '{"command": "ls"}')), REGISTRY) is None
    assert PauseOnRisk(RiskClass.FILE_MUTATION).should_pause(1, step(write), REGISTRY)
    assert "nope (unknown)" in (review.should_pause(1, step(("nope", "{}")), REGISTRY) or "")


async def test_a_run_pauses_before_a_risky_step_and_the_policy_is_recorded(
    ctx: RunContext,
) -> None:
    model = ScriptedModel(
        [
            {"tool_calls": [{"name": "read_file", "arguments": {"path": "x"}}]},
            {"tool_calls": [{"name": "execute_command", "arguments": {"command": "make"}}]},
            "never",
        ]
    )
    options = RunOptions(review_policy=PauseOnRisk("shell_mutation"))
    result = await Agent(model, [read_file, execute_command]).run_in(ctx, "build", options)
    assert result.stop_cause is StopCause.SUSPENDED
    assert result.state.step == 2  # the read went through; the command waits
    record_policy(result.state, ctx, options)
    rebuilt = options_from(result.state)
    assert isinstance(rebuilt.review_policy, PauseOnRisk)
    assert rebuilt.review_policy.minimum is RiskClass.SHELL_MUTATION

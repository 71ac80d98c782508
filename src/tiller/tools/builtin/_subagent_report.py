"""What the `agent` tool's subagent runs report (`SubagentReport`), who runs them
(`SubagentRunner`), and the tool's name: what the loop needs of the tool without building it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, Protocol, runtime_checkable

from ...cancel import CancellationToken
from ...conversation import Taint, Usage

__all__ = ["AGENT_TOOL", "SubagentReport", "SubagentRunner", "describe_report"]

#: The tool's name (the loop recognises its calls by it).
AGENT_TOOL: Final = "agent"


@dataclass(frozen=True, slots=True)
class SubagentReport:
    """How one subagent run ended, for the model and for the program (`ToolOutput.data`).

    `stop_cause` is the child's `StopCause` value (`completed`, `max_steps`, `cancelled`,
    ...); `suspended` means it waits for a person, and so does the parent (the call is
    held, and continues on resume). `turns`, `usage` and `cost_usd` are what the child
    spent in all (across a suspension too); the parent's usage includes them.
    """

    subagent_run_id: str
    subagent_type: str
    text: str
    stop_cause: str
    turns: int = 0
    usage: Usage = field(default_factory=Usage)
    cost_usd: float = 0.0
    error: str | None = None
    suspended: bool = False
    #: What the child read (`Taint` flags): its answer may carry it.
    taint: int = 0
    #: A person sent it to the background while it ran: it keeps running, and its report
    #: comes later as a note (`[background work: {subagent_run_id}] ...`).
    detached: bool = False

    @property
    def brings_untrusted(self) -> bool:
        """Whether the child read untrusted input, so its answer may repeat it."""
        return bool(Taint(self.taint) & Taint.UNTRUSTED_INPUT)

    @property
    def failed(self) -> bool:
        """Whether the child produced no usable answer (it failed, timed out, was cut)."""
        return self.error is not None

    def to_data(self) -> dict[str, Any]:
        return {
            "subagentRunId": self.subagent_run_id,
            "type": self.subagent_type,
            "stopCause": self.stop_cause,
            "turns": self.turns,
            "usage": {
                "inputTokens": self.usage.input_tokens,
                "outputTokens": self.usage.output_tokens,
                "totalTokens": self.usage.total_tokens,
            },
            "costUsd": round(self.cost_usd, 6),
            **({"detached": True} if self.detached else {}),
        }


@runtime_checkable
class SubagentRunner(Protocol):
    """What `ExecContext.subagents` is: the run's subagent starter (`tiller.loop`)."""

    async def run(
        self,
        *,
        call_id: str,
        subagent_type: str,
        prompt: str,
        description: str,
        background: CancellationToken | None = None,
    ) -> SubagentReport:
        """Run (or, after a resume, continue) the subagent of call `call_id`; raise
        `ToolError` for a request that cannot be run (an unknown type). If `background`
        (the step's background token) fires while it runs, return at once a report with
        `detached` set, leaving the subagent running."""
        ...


def describe_report(report: SubagentReport) -> str:
    """The result the model reads: the child's answer, then one line of what it spent."""
    usage = report.usage
    spent = (
        f"[subagent {report.subagent_run_id} ({report.subagent_type}): {report.stop_cause}, "
        f"{report.turns} turn{'' if report.turns == 1 else 's'}, "
        f"{usage.input_tokens} input + {usage.output_tokens} output tokens]"
    )
    if report.detached:
        return (
            f"The person moved subagent {report.subagent_run_id} ({report.subagent_type}) to "
            "the background: it keeps working, and its report will reach you as a note "
            f"([background work: {report.subagent_run_id}]) at a later step. Carry on "
            "with other work meanwhile; do not start it again."
        )
    if report.suspended:
        return f"The subagent is waiting for a person's approval.\n{spent}"
    if report.error is not None:
        partial = f"\nWhat it wrote before it stopped:\n{report.text}" if report.text else ""
        return f"The subagent did not finish: {report.error}{partial}\n{spent}"
    text = report.text or "(the subagent gave no answer)"
    if report.stop_cause != "completed":
        text = f"{text}\n(the subagent stopped early: {report.stop_cause})"
    return f"{text}\n\n{spent}"

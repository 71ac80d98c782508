"""The agent loop: `Agent` (and `agent.iter`, a run step by step: `ModelTurn`,
`Dispatch`, `Suspend`, `Finish`), the per-run `RunContext` and its live `RunControls`,
`RunOptions`, `Budget`, `RunResult` (with the calls it refused), review policies,
guardrails, capture sinks, resuming, and the subagents a run starts (`SubagentConfig`,
`SubagentType`)."""

from typing import TYPE_CHECKING

from .. import _public

if TYPE_CHECKING:
    from ._agent import Agent

    # For tiller's own packages (not API; not in __all__).
    from ._agent_ref import jail_root_of as jail_root_of
    from ._agent_ref import load_agent as load_agent
    from ._agent_ref import options_from as options_from
    from ._agent_ref import record_policy as record_policy
    from ._agent_ref import refuse_code_inside as refuse_code_inside
    from ._agent_ref import run_context_from as run_context_from
    from ._budget import Budget, Pricing
    from ._capture import CaptureSink, CaptureSinkFactory, ModelCallRecord, ToolResultRecord
    from ._context import RunContext
    from ._controls import RunControls
    from ._detach import DetachSwitch
    from ._dispatch import CALL_RERUN_EVENT
    from ._guardrails import Guardrail, GuardrailOutcome, MaxResponseLength, RefusalKeywords
    from ._iter import AgentRun
    from ._mailbox_route import MailboxRoute
    from ._model_turn import ResponseTooLarge
    from ._model_wrapper import ModelWrapper
    from ._options import RunOptions
    from ._outbox_route import OutboxRoute
    from ._refusals import RefusedCall
    from ._result import RunResult, ToolTraceEntry
    from ._resume import (
        ContinueAs,
        FromCheckpoint,
        ResumeDecision,
        ResumeReplayBlocked,
        recover,
        resume,
    )
    from ._retry_event import MODEL_RETRY_EVENT
    from ._review import (
        NeverReview,
        PauseEveryStep,
        PauseOnRisk,
        PauseOnTools,
        PauseOnWrites,
        ReviewPolicy,
    )
    from ._run import LoopFailed
    from ._steering import SteeringQueue
    from ._steps import Dispatch, Finish, ModelTurn, Step, Suspend
    from ._subagent_types import SubagentConfig, SubagentType

    # For tiller's own packages (not API; not in __all__).
    from ._window import estimate_tokens as estimate_tokens
    from ._window import history_window as history_window

__all__ = [
    "CALL_RERUN_EVENT",
    "MODEL_RETRY_EVENT",
    "Agent",
    "AgentRun",
    "Budget",
    "CaptureSink",
    "CaptureSinkFactory",
    "ContinueAs",
    "DetachSwitch",
    "Dispatch",
    "Finish",
    "FromCheckpoint",
    "Guardrail",
    "GuardrailOutcome",
    "LoopFailed",
    "MailboxRoute",
    "MaxResponseLength",
    "ModelCallRecord",
    "ModelTurn",
    "ModelWrapper",
    "NeverReview",
    "OutboxRoute",
    "PauseEveryStep",
    "PauseOnRisk",
    "PauseOnTools",
    "PauseOnWrites",
    "Pricing",
    "RefusalKeywords",
    "RefusedCall",
    "ResponseTooLarge",
    "ResumeDecision",
    "ResumeReplayBlocked",
    "ReviewPolicy",
    "RunContext",
    "RunControls",
    "RunOptions",
    "RunResult",
    "SteeringQueue",
    "Step",
    "SubagentConfig",
    "SubagentType",
    "Suspend",
    "ToolResultRecord",
    "ToolTraceEntry",
    "recover",
    "resume",
]

#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._agent": ("Agent",),
    "._agent_ref": (
        "jail_root_of",
        "load_agent",
        "options_from",
        "record_policy",
        "refuse_code_inside",
        "run_context_from",
    ),
    "._budget": ("Budget", "Pricing"),
    "._capture": ("CaptureSink", "CaptureSinkFactory", "ModelCallRecord", "ToolResultRecord"),
    "._context": ("RunContext",),
    "._controls": ("RunControls",),
    "._detach": ("DetachSwitch",),
    "._dispatch": ("CALL_RERUN_EVENT",),
    "._guardrails": ("Guardrail", "GuardrailOutcome", "MaxResponseLength", "RefusalKeywords"),
    "._iter": ("AgentRun",),
    "._mailbox_route": ("MailboxRoute",),
    "._model_turn": ("ResponseTooLarge",),
    "._model_wrapper": ("ModelWrapper",),
    "._options": ("RunOptions",),
    "._outbox_route": ("OutboxRoute",),
    "._refusals": ("RefusedCall",),
    "._result": ("RunResult", "ToolTraceEntry"),
    "._resume": (
        "ContinueAs",
        "FromCheckpoint",
        "ResumeDecision",
        "ResumeReplayBlocked",
        "recover",
        "resume",
    ),
    "._retry_event": ("MODEL_RETRY_EVENT",),
    "._review": (
        "NeverReview",
        "PauseEveryStep",
        "PauseOnRisk",
        "PauseOnTools",
        "PauseOnWrites",
        "ReviewPolicy",
    ),
    "._run": ("LoopFailed",),
    "._steering": ("SteeringQueue",),
    "._steps": ("Dispatch", "Finish", "ModelTurn", "Step", "Suspend"),
    "._subagent_types": ("SubagentConfig", "SubagentType"),
    "._window": ("estimate_tokens", "history_window"),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.loop.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

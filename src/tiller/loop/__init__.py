"""The agent loop: `Agent`, the per-run `RunContext`, `RunOptions`, `Budget`, `RunResult`,
and the subagents a run starts (`SubagentConfig`, `SubagentType`, `Subagents`)."""

from .. import _public
from ._agent import Agent
from ._agent_ref import load_agent, options_from, policy_of, record_policy, run_context_from
from ._budget import Budget, Pricing
from ._capture import CaptureSink, CaptureSinkFactory, ModelCallRecord, ToolResultRecord
from ._context import RunContext
from ._controls import RunControls
from ._detach import DetachSwitch
from ._guardrails import Guardrail, GuardrailOutcome, MaxResponseLength, RefusalKeywords
from ._mailbox_route import MailboxRoute, RunMailbox
from ._options import RunOptions
from ._outbox_route import OutboxRoute
from ._refusals import RefusedCall
from ._result import RunResult, ToolTraceEntry
from ._resume import ResumeDecision, ResumeReplayBlocked, resume
from ._review import (
    NeverReview,
    PauseEveryStep,
    PauseOnRisk,
    PauseOnTools,
    PauseOnWrites,
    ReviewPolicy,
)
from ._run import LoopFailed, ResponseTooLarge
from ._services import SCRATCH_SUBDIR, RunServices
from ._steering import SteeringQueue
from ._subagent_types import SubagentConfig, SubagentType
from ._subagents import Subagents
from ._window import estimate_tokens, history_window

__all__ = [
    "SCRATCH_SUBDIR",
    "Agent",
    "Budget",
    "CaptureSink",
    "CaptureSinkFactory",
    "DetachSwitch",
    "Guardrail",
    "GuardrailOutcome",
    "LoopFailed",
    "MailboxRoute",
    "MaxResponseLength",
    "ModelCallRecord",
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
    "RunMailbox",
    "RunOptions",
    "RunResult",
    "RunServices",
    "SteeringQueue",
    "SubagentConfig",
    "SubagentType",
    "Subagents",
    "ToolResultRecord",
    "ToolTraceEntry",
    "estimate_tokens",
    "history_window",
    "load_agent",
    "options_from",
    "policy_of",
    "record_policy",
    "resume",
    "run_context_from",
]

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

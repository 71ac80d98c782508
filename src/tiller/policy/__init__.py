"""Who decides whether a tool call runs, in a fixed order that fails closed (DESIGN §3).

- Approvers (`AllowAll`, `ReadOnly`, `Callback`, `NoOneToAsk`) answer an Ask with a
  `Decision`; the `ApprovalBroker` parks the call, answers deny on cancel and remembers
  "approve always" under a key as narrow as the danger (`approval_key`). An
  `ExplainedApprover` (the terminal prompt) is also told why it is asked (`AskReason`).
- `RiskClass` and `PolicyDecision`: the policy engine's vocabulary; `PolicyEngine` decides
  a call from its risk (`classify_command` for the shell), the live safety mode and the
  user's `PolicyRules`.
- `Interlock`: no send after private data met untrusted input.
- `AutoClassifier`: turns a Classify decision into Allow or Ask, asking the run's model.
- `HookSet`: the user's pre_tool (deciding), post_tool and session_end (observing) hooks.
"""

from .. import _public
from ._approver import (
    AllowAll,
    Approver,
    AskReason,
    Callback,
    Decision,
    ExplainedApprover,
    NoOneToAsk,
    ReadOnly,
)
from ._broker import ApprovalBroker, approval_key
from ._classifier import (
    FENCE_BEGIN,
    FENCE_END,
    AutoClassifier,
    ClassifierBudget,
    VetBasis,
    VetRequest,
    VetVerdict,
    find_injection_marker,
)
from ._decided import CallDecision, DecidedApprover
from ._engine import CallRisk, PolicyEngine, mode_default
from ._hook_events import (
    DEFAULT_HOOK_TIMEOUT,
    HookEvent,
    HookKind,
    HookOutcome,
    HookVerdict,
    PostToolEvent,
    PreToolEvent,
    SessionEndEvent,
)
from ._hooks import FunctionHook, HookConfigError, HookLike, HookSet
from ._interlock import Interlock, InterlockVerdict, capabilities_of, taint_names, taint_of
from ._risk import DecisionKind, PolicyDecision, RiskClass
from ._rules import PolicyConfigError, PolicyRule, PolicyRules, RuleAction
from ._shell_hook import ShellHook
from ._shell_risk import ShellPart, ShellRisk, classify_command

__all__ = [
    "DEFAULT_HOOK_TIMEOUT",
    "FENCE_BEGIN",
    "FENCE_END",
    "AllowAll",
    "ApprovalBroker",
    "Approver",
    "AskReason",
    "AutoClassifier",
    "CallRisk",
    "CallDecision",
    "Callback",
    "ClassifierBudget",
    "DecidedApprover",
    "Decision",
    "DecisionKind",
    "ExplainedApprover",
    "FunctionHook",
    "HookConfigError",
    "HookEvent",
    "HookKind",
    "HookLike",
    "HookOutcome",
    "HookSet",
    "HookVerdict",
    "Interlock",
    "InterlockVerdict",
    "NoOneToAsk",
    "PolicyConfigError",
    "PolicyDecision",
    "PolicyEngine",
    "PolicyRule",
    "PolicyRules",
    "PostToolEvent",
    "PreToolEvent",
    "ReadOnly",
    "RiskClass",
    "RuleAction",
    "SessionEndEvent",
    "ShellHook",
    "ShellPart",
    "ShellRisk",
    "VetBasis",
    "VetRequest",
    "VetVerdict",
    "approval_key",
    "capabilities_of",
    "classify_command",
    "find_injection_marker",
    "mode_default",
    "taint_names",
    "taint_of",
]

# Front-door names report `tiller` as their module from here on (tiller._public).
_public.rehome(__name__, globals())

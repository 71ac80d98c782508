"""Who decides whether a tool call runs, in a fixed order that fails closed (DESIGN §3).

- Approvers (`AllowAll`, `ReadOnly`, `Callback`, `NoOneToAsk`) answer an Ask with a
  `Decision`; the `ApprovalBroker` parks the call, answers deny on cancel and remembers
  "approve always" under a key as narrow as the danger. An
  `ExplainedApprover` (the terminal prompt) is also told why it is asked (`AskReason`).
- `RiskClass` and `PolicyDecision`: the policy engine's vocabulary; `PolicyEngine` decides
  a call from its risk (a real parse for the shell), the live safety mode and the user's
  `PolicyRules`.
- `Interlock`: no send after private data met untrusted input.
- `AutoClassifier`: turns a Classify decision into Allow or Ask, asking the run's model.
- `HookSet`: the user's pre_tool (deciding), post_tool and session_end (observing) hooks.
"""

from typing import TYPE_CHECKING

from .. import _public

if TYPE_CHECKING:
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

    # For tiller's own packages (not API; not in __all__).
    from ._broker import ApprovalBroker as ApprovalBroker
    from ._broker import approval_key as approval_key
    from ._classifier import AutoClassifier, ClassifierBudget, VetRequest, VetVerdict

    # For tiller's own packages (not API; not in __all__).
    from ._decided import CallDecision as CallDecision
    from ._decided import DecidedApprover as DecidedApprover
    from ._engine import PolicyEngine
    from ._file_pins import FilePin as FilePin
    from ._file_pins import changed_pins as changed_pins
    from ._file_pins import pin_files as pin_files
    from ._file_pins import script_paths as script_paths
    from ._hook_events import (
        HookEvent,
        HookKind,
        HookOutcome,
        HookVerdict,
        PostToolEvent,
        PreToolEvent,
        SessionEndEvent,
    )
    from ._hooks import FunctionHook, HookConfigError, HookLike, HookSet
    from ._interlock import Interlock, InterlockVerdict

    # For tiller's own packages (not API; not in __all__).
    from ._interlock import capabilities_of as capabilities_of
    from ._interlock import taint_names as taint_names
    from ._interlock import taint_of as taint_of
    from ._risk import DecisionKind, PolicyDecision, RiskClass
    from ._rules import PolicyConfigError, PolicyRule, PolicyRules, RuleAction
    from ._shell_hook import ShellHook

    # For tiller's own packages (not API; not in __all__).
    from ._shell_risk import classify_command as classify_command

__all__ = [
    "AllowAll",
    "Approver",
    "AskReason",
    "AutoClassifier",
    "Callback",
    "ClassifierBudget",
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
    "VetRequest",
    "VetVerdict",
]

#: Where each name lives. A name's module is imported the first time the name is asked
#: for (PEP 562), so importing one name does not import the whole namespace (DESIGN §10).
_HOMES = {
    "._approver": (
        "AllowAll",
        "Approver",
        "AskReason",
        "Callback",
        "Decision",
        "ExplainedApprover",
        "NoOneToAsk",
        "ReadOnly",
    ),
    "._broker": ("ApprovalBroker", "approval_key"),
    "._classifier": ("AutoClassifier", "ClassifierBudget", "VetRequest", "VetVerdict"),
    "._decided": ("CallDecision", "DecidedApprover"),
    "._engine": ("PolicyEngine",),
    "._file_pins": ("FilePin", "changed_pins", "pin_files", "script_paths"),
    "._hook_events": (
        "HookEvent",
        "HookKind",
        "HookOutcome",
        "HookVerdict",
        "PostToolEvent",
        "PreToolEvent",
        "SessionEndEvent",
    ),
    "._hooks": ("FunctionHook", "HookConfigError", "HookLike", "HookSet"),
    "._interlock": (
        "Interlock",
        "InterlockVerdict",
        "capabilities_of",
        "taint_names",
        "taint_of",
    ),
    "._risk": ("DecisionKind", "PolicyDecision", "RiskClass"),
    "._rules": ("PolicyConfigError", "PolicyRule", "PolicyRules", "RuleAction"),
    "._shell_hook": ("ShellHook",),
    "._shell_risk": ("classify_command",),
}

# Hidden from type checkers, which see the names through the imports above: a visible
# module `__getattr__` would make every misspelt `tiller.policy.X` type-check.
if not TYPE_CHECKING:
    __getattr__ = _public.lazy_names(__name__, globals(), _HOMES)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))

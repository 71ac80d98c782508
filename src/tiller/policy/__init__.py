"""Who decides whether a tool call runs, in a fixed order that fails closed (DESIGN §3).

- Approvers (`AllowAll`, `ReadOnly`, `Callback`, `NoOneToAsk`) answer an Ask with a
  `Decision`; the `ApprovalBroker` parks the call, answers deny on cancel and remembers
  "approve always" under a key as narrow as the danger (`approval_key`).
- `RiskClass` and `PolicyDecision`: the policy engine's vocabulary.
- `Interlock`: no send after private data met untrusted input.
"""

from ._approver import AllowAll, Approver, Callback, Decision, NoOneToAsk, ReadOnly
from ._broker import ApprovalBroker, approval_key
from ._interlock import Interlock, InterlockVerdict, taint_names, taint_of
from ._risk import DecisionKind, PolicyDecision, RiskClass

__all__ = [
    "AllowAll",
    "ApprovalBroker",
    "Approver",
    "Callback",
    "Decision",
    "DecisionKind",
    "Interlock",
    "InterlockVerdict",
    "NoOneToAsk",
    "PolicyDecision",
    "ReadOnly",
    "RiskClass",
    "approval_key",
    "taint_names",
    "taint_of",
]

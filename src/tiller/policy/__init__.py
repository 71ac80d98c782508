"""Who decides whether a tool call runs. (The policy issue adds safety modes, the policy
engine, the classifier, hooks and the interlock; this holds the approvers.)"""

from ._approver import AllowAll, Approver, Callback, Decision, NoOneToAsk, ReadOnly

__all__ = ["AllowAll", "Approver", "Callback", "Decision", "NoOneToAsk", "ReadOnly"]
